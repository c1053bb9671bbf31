"""Tokenizer, chat template and TITO checks (see the modules for details).

The shipped tokenizer asset is built by a recipe beside the base models' (``core.pretrain.tokenizer``).
"""

from core.tokenizer.chat_template import (
    CHAT_TEMPLATE,
    CHAT_TEMPLATE_REV,
    encode_prompt,
    encode_response,
    render_prompt,
)
from core.tokenizer.tito import prefix_hashes, retokenize, tito_violations
from core.tokenizer.tokenizer import (
    DEFAULT_TOKENIZER_PATH,
    SPECIAL_TOKENS,
    Tokenizer,
    default_tokenizer,
)

__all__ = [
    "CHAT_TEMPLATE",
    "CHAT_TEMPLATE_REV",
    "DEFAULT_TOKENIZER_PATH",
    "SPECIAL_TOKENS",
    "Tokenizer",
    "default_tokenizer",
    "encode_prompt",
    "encode_response",
    "prefix_hashes",
    "render_prompt",
    "retokenize",
    "tito_violations",
]
