"""Gate reports: a plain-text table for the terminal, JUnit XML for CI, a Markdown summary.

JUnit mapping: one testcase per check (classname ``closedloop.<contract>``); ``fail`` is a
``<failure>``, ``error`` an ``<error>``, ``not_applicable`` ``<skipped>``; ``warn`` passes with
the finding in ``<system-out>``. Example rows go into the failure text as JSON lines.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from contracts.gate_result import GateResult
from contracts.result import ERROR, FAIL, NOT_APPLICABLE, WARN, CheckResult


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.4g}"


def _state(gate: GateResult) -> str:
    return f"run {gate.run_id}: status {gate.state.status or 'unknown'}, {gate.state.summary()}"


def _policy(gate: GateResult) -> str:
    return f"policy {gate.policy.name!r}: {gate.policy_source}"


def _verdict(gate: GateResult) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in sorted(gate.counts.items()))
    word = "PASSED" if gate.passed else "FAILED"
    return f"gate {word}: {gate.run_id} under policy {gate.policy.name!r} ({counts})"


def format_table(gate: GateResult) -> str:
    """The terminal table: check, status, observed, threshold, violations / rows; then the
    findings, the policy and where it came from, the run's state and the verdict."""
    header = ("check", "status", "observed", "threshold", "violations")
    rows = [
        (r.id, r.status, _num(r.observed), _num(r.threshold), f"{r.n_violations}/{r.n_rows}")
        for r in gate.results
    ]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    lines = [
        "  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=True)).rstrip()
        for row in (header, *rows)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in gate.results:
        if r.status in (FAIL, ERROR, WARN):
            lines.append(f"{r.status.upper()} {r.id}: {r.message}")
            lines += [f"    {json.dumps(e, sort_keys=True)}" for e in r.examples]
    lines += [_policy(gate), _state(gate), _verdict(gate)]
    return "\n".join(lines)


def _details(r: CheckResult) -> str:
    head = (
        f"{r.message}\nobserved {_num(r.observed)}, threshold {_num(r.threshold)}, "
        f"{r.n_violations} of {r.n_rows} rows"
    )
    return "\n".join([head, *(json.dumps(e, sort_keys=True) for e in r.examples)])


def junit_xml(gate: GateResult) -> str:
    """JUnit XML, one testcase per check."""
    counts = gate.counts
    suite = ET.Element(
        "testsuite",
        name=f"closedloop.gate.{gate.policy.name}",
        tests=str(len(gate.results)),
        failures=str(counts[FAIL]),
        errors=str(counts[ERROR]),
        skipped=str(counts[NOT_APPLICABLE]),
        time=f"{gate.seconds:.3f}",
        timestamp=gate.checked_at.isoformat(),
    )
    props = ET.SubElement(suite, "properties")
    for name, value in (
        ("run_dir", gate.run_dir),
        ("run_id", gate.run_id),
        ("baseline", gate.baseline or ""),
        ("policy_source", gate.policy_source),
        *((f"run_{k}", "" if v is None else v) for k, v in gate.state.as_dict().items()),
    ):
        ET.SubElement(props, "property", name=name, value=str(value))
    for r in gate.results:
        case = ET.SubElement(
            suite,
            "testcase",
            classname=f"closedloop.{r.contract}",
            name=r.check,
            time=f"{r.seconds:.3f}",
        )
        if r.status == FAIL:
            ET.SubElement(
                case, "failure", message=r.message, type="ContractViolation"
            ).text = _details(r)
        elif r.status == ERROR:
            ET.SubElement(case, "error", message=r.message, type="CheckError").text = _details(r)
        elif r.status == NOT_APPLICABLE:
            ET.SubElement(case, "skipped", message=r.message)
        elif r.status == WARN:
            ET.SubElement(case, "system-out").text = "WARN " + _details(r)
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode")


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(gate: GateResult) -> str:
    """A Markdown summary: verdict, the results table, then each finding with its examples."""
    lines = [f"## {_verdict(gate)}", "", f"Run `{gate.run_dir}`"]
    if gate.baseline is not None:
        lines[-1] += f", baseline `{gate.baseline}`"
    lines[-1] += f"; status {gate.state.status or 'unknown'}, {gate.state.summary()}"
    lines += ["", _md_cell(_policy(gate))]
    lines += ["", "| check | status | observed | threshold | violations |", "|---|---|---|---|---|"]
    for r in gate.results:
        lines.append(
            f"| `{r.id}` | {r.status} | {_num(r.observed)} | {_num(r.threshold)} | "
            f"{r.n_violations}/{r.n_rows} |"
        )
    findings = [r for r in gate.results if r.status in (FAIL, ERROR, WARN)]
    for r in findings:
        lines += ["", f"### {r.status}: `{r.id}`", "", _md_cell(r.message)]
        if r.examples:
            lines += ["", "```json", *(json.dumps(e, sort_keys=True) for e in r.examples), "```"]
    return "\n".join(lines) + "\n"
