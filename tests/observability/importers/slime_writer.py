"""slime's ``--dump-details`` writers, re-enacted for fixtures (THUDM/slime @ 624b824a898a).

Each function follows the named slime function at that commit step by step, with slime's own
types (Sample fields, torch tensors of the dtypes ``tensorize_rollout_data_for_training``
casts to, the ``dp_shards`` gather) so the files load exactly as slime's would:
``save_debug_rollout_data`` -> ``DIR/rollout_data/{id}.pt``; ``_convert_samples_to_train_data``,
``_split_train_data_by_dp``, ``process_rollout_data``, the actor's ``log_probs`` / ``entropy``
/ GRPO ``advantages`` and ``_build_dump_payload`` -> ``DIR/train_data/{id}.pt``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.observability.importers.episodes import Episode


def sample_to_dict(ep: Episode) -> dict:
    """``Sample(...).to_dict()`` of a generated sample (``slime/utils/types.py``): the dataclass
    ``__dict__`` with ``status`` as its value and the nested infos as dicts."""
    return {
        "group_index": ep.group,
        "index": ep.index,
        "rollout_id": None,
        "prompt": f"question {ep.index}",
        "tokens": ep.prompt + ep.response,
        "multimodal_inputs": None,
        "multimodal_train_inputs": None,
        "multimodal_train_input_id": None,
        "apply_chat_template_kwargs": {},
        "response": f"answer {ep.index}",
        "response_length": len(ep.response),
        "label": "42",
        "reward": ep.reward,
        "loss_mask": None,  # None: every response token (set in _convert_samples_to_train_data)
        "weight_versions": ["1"],
        "rollout_log_probs": list(ep.rollout_logp),
        "rollout_top_p_token_ids": None,
        "rollout_top_p_token_offsets": None,
        "rollout_routed_experts": None,
        "remove_sample": False,
        "teacher_log_probs": None,
        "status": "truncated" if ep.truncated else "completed",
        "metadata": {},
        "generate_function_path": None,
        "custom_rm_path": None,
        "train_metadata": None,
        "session_id": None,
        "non_generation_time": 0.0,
        "spec_info": {
            "spec_accept_token_num": 0,
            "spec_draft_token_num": 0,
            "spec_verify_ct": 0,
            "completion_token_num": 0,
        },
        "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": len(ep.prompt)},
    }


def save_debug_rollout_data(dump_dir: Path, episodes: list[Episode], rollout_id: int) -> Path:
    path = dump_dir / "rollout_data" / f"{rollout_id}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"rollout_id": rollout_id, "samples": [sample_to_dict(e) for e in episodes]}, path)
    return path


def _train_data(episodes: list[Episode]) -> dict:
    """``RolloutManager._convert_samples_to_train_data`` (GRPO-normalised rewards), with the
    trainer's token sequence (a custom convert function may re-tokenize)."""
    loss_masks = [[1] * len(e.response) for e in episodes]
    return {
        "tokens": [e.prompt + e.train_response for e in episodes],
        "response_lengths": [len(e.train_response) for e in episodes],
        "rewards": [e.advantage for e in episodes],
        "raw_reward": [e.reward for e in episodes],
        "truncated": [1 if e.truncated else 0 for e in episodes],
        "sample_indices": [e.index for e in episodes],
        "rollout_ids": [e.index for e in episodes],
        "loss_masks": loss_masks,
        "rollout_mask_sums": [sum(m) for m in loss_masks],
        "rollout_log_probs": [list(e.rollout_logp) for e in episodes],
    }


def _rank_rollout_data(data: dict, partition: list[int]) -> dict:
    """``_split_train_data_by_dp`` for one rank, ``tensorize_rollout_data_for_training`` and
    the actor side: ``process_rollout_data`` and the fields the actor adds before the dump."""
    out = {"partition": partition}
    for key in (
        "tokens",
        "response_lengths",
        "rewards",
        "truncated",
        "loss_masks",
        "sample_indices",
        "rollout_ids",
        "rollout_mask_sums",
        "rollout_log_probs",
    ):
        out[key] = [data[key][j] for j in partition]
    out["raw_reward"] = data["raw_reward"]
    out["total_lengths"] = [len(t) for t in data["tokens"]]
    out["global_batch_sizes"] = [len(data["tokens"])]
    out["num_microbatches"] = [1]
    out["micro_batch_indices"] = [[list(range(len(partition)))]]
    out["tokens"] = [torch.as_tensor(v, dtype=torch.long) for v in out["tokens"]]
    out["loss_masks"] = [torch.as_tensor(v, dtype=torch.int) for v in out["loss_masks"]]
    out["rollout_log_probs"] = [
        torch.as_tensor(v, dtype=torch.float32) for v in out["rollout_log_probs"]
    ]
    out["rollout_mask_sums"] = torch.as_tensor(out["rollout_mask_sums"], dtype=torch.float32)
    # process_rollout_data: local total lengths and raw rewards
    out["total_lengths"] = [out["total_lengths"][i] for i in partition]
    out["local_raw_reward"] = [out["raw_reward"][i] for i in partition]
    return out


def _actor_fields(out: dict, episodes: list[Episode]) -> None:
    """compute_log_prob (``log_probs``, ``entropy``) and GRPO advantages (the normalised reward
    on every response token)."""
    eps = [episodes[i] for i in out["partition"]]
    out["log_probs"] = [torch.tensor(e.train_logp, dtype=torch.float32) for e in eps]
    out["entropy"] = [torch.tensor(e.entropy, dtype=torch.float32) for e in eps]
    out["advantages"] = [
        torch.full((len(e.train_response),), float(r)) for e, r in zip(eps, out["rewards"])
    ]


def build_dump_payload(dp_shards: list[dict], *, rollout_id: int, writer_rank: int) -> dict:
    """``slime/observability/train_data_utils.py::_build_dump_payload``."""
    layout_fields = ("micro_batch_indices", "num_microbatches", "global_batch_sizes")
    whole_batch_fields = ("raw_reward",)
    id_columns = {"sample_indices": "sample_index", "partition": "rollout_position"}

    def per_sample(value, n):
        if torch.is_tensor(value):
            return value.dim() >= 1 and value.size(0) == n
        return isinstance(value, list | tuple) and len(value) == n

    samples, layout, whole = [], [], {}
    for shard in dp_shards:
        rollout_data, dp_rank = shard["rollout_data"], shard["data_parallel_rank"]
        n = len(rollout_data["response_lengths"])
        shard_layout = {"rank": shard["rank"], "data_parallel_rank": dp_rank}
        for column in id_columns:
            value = rollout_data.get(column)
            shard_layout[column] = list(value) if value is not None else None
        columns = {}
        for key, value in rollout_data.items():
            if key in id_columns:
                continue
            if key in whole_batch_fields:
                whole.setdefault(key, value)
            elif key in layout_fields or not per_sample(value, n):
                shard_layout[key] = value
            else:
                columns[key] = value
        for i in range(n):
            sample = {"data_parallel_rank": dp_rank}
            for column, scalar_key in id_columns.items():
                if rollout_data.get(column) is not None:
                    sample[scalar_key] = rollout_data[column][i]
            for key, column in columns.items():
                sample[key] = column[i]
            samples.append(sample)
        layout.append(shard_layout)
    samples.sort(key=lambda s: s["rollout_position"])
    return {
        "format_version": 2,
        "rollout_id": rollout_id,
        "rank": writer_rank,
        "samples": samples,
        "dp_shards": layout,
        **whole,
    }


def save_debug_train_data(
    dump_dir: Path, episodes: list[Episode], rollout_id: int, *, dp_size: int = 2
) -> Path:
    """Rollout -> ranks -> actor -> one gathered file (``save_debug_train_data``)."""
    data = _train_data(episodes)
    shards = []
    for r in range(dp_size):
        out = _rank_rollout_data(data, list(range(r, len(episodes), dp_size)))
        _actor_fields(out, episodes)
        shards.append({"rank": r, "data_parallel_rank": r, "rollout_data": out})
    path = dump_dir / "train_data" / f"{rollout_id}.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(build_dump_payload(shards, rollout_id=rollout_id, writer_rank=0), path)
    return path


def write_dump(dump_dir: Path, steps: list[list[Episode]], *, rollout_data: bool = True) -> Path:
    """A ``--dump-details`` directory holding ``steps`` (rollout ids 0, 1, ...)."""
    for rollout_id, episodes in enumerate(steps):
        if rollout_data:
            save_debug_rollout_data(dump_dir, episodes, rollout_id)
        save_debug_train_data(dump_dir, episodes, rollout_id)
    return dump_dir
