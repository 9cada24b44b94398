"""``model.attn_implementation=varlen``: padding-free rows through PyTorch's own flash-attention
kernel for variable-length batches (``torch.nn.attention.varlen.varlen_attn``, torch >= 2.10), so
packed SFT pays on a CUDA machine that has no flash-attn package (building it takes hours; GPU
images rarely carry it).

Why: a padding-free batch is one row whose position ids restart at every packed row. ``sdpa`` keeps
the rows apart with a block-diagonal mask built from those ids, and with a mask it leaves its flash
kernel for one that reads the whole mask per head. The varlen kernel takes the row boundaries
(``cu_seqlens``) instead and skips the blocks between rows (what it bought: docs/measurements.md,
"Numbers behind choices in the code").

Registered with transformers' ``AttentionInterface`` under the name ``varlen``. It takes the varlen
kernel only for a padding-free training batch on CUDA (one row, position ids that restart, no KV
cache, no sliding window, no dropout); every other call (padded batches, generation, CPU) is
transformers' ``sdpa`` with the mask ``sdpa`` gets, so the result there is sdpa's own. The packing
probe (rlvr.training_loop.packing) compares the two paths on the loaded model before any step.
"""

from __future__ import annotations

from typing import Any

NAME = "varlen"


def available() -> bool:
    """Whether this torch has the varlen kernel's Python API (torch >= 2.10)."""
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return False
    return True


def _bounds(position_ids: Any) -> tuple[Any, int]:
    """The rows' cumulative starts and the longest row, from position ids that restart at each row
    (transformers' own reading, the one its flash-attention path uses)."""
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    (cu_seqlens, _), (longest, _) = prepare_fa_kwargs_from_position_ids(position_ids)
    return cu_seqlens, int(longest)


def takes_kernel(
    query: Any, key: Any, position_ids: Any, dropout: float, sliding_window: Any, on_cuda: bool | None = None
) -> bool:
    """Whether a call is a padding-free training batch the varlen kernel computes exactly
    (``on_cuda``: the device rule, read from ``query`` unless given)."""
    from transformers.modeling_flash_attention_utils import _is_packed_sequence

    return bool(
        (query.is_cuda if on_cuda is None else on_cuda)
        and query.shape[0] == 1
        and key.shape[2] == query.shape[2]  # no KV cache
        and not dropout
        and sliding_window is None
        and position_ids is not None
        and _is_packed_sequence(position_ids, batch_size=1)
    )


def attention_forward(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    dropout: float = 0.0,
    scaling: float | None = None,
    sliding_window: int | None = None,
    **kwargs: Any,
) -> tuple[Any, None]:
    """transformers' attention signature: query (batch, heads, tokens, dim), key and value
    (batch, kv heads, tokens, dim); returns (batch, tokens, heads, dim)."""
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    position_ids = kwargs.get("position_ids")
    if not takes_kernel(query, key, position_ids, dropout, sliding_window):
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    from torch.nn.attention.varlen import varlen_attn

    groups = getattr(module, "num_key_value_groups", 1)
    # (1, heads, tokens, dim) -> (tokens, heads, dim); key and value repeated to the query's heads
    # (torch 2.11's kernel takes equal head counts)
    q, k, v = (
        t[0].transpose(0, 1).contiguous() for t in (query, repeat_kv(key, groups), repeat_kv(value, groups))
    )
    cu_seqlens, longest = _bounds(position_ids)
    out = varlen_attn(q, k, v, cu_seqlens, cu_seqlens, longest, longest, scale=scaling, window_size=(-1, 0))
    return out.unsqueeze(0), None


def register() -> None:
    """Make ``attn_implementation="varlen"`` known to transformers (idempotent): the attention
    above, and sdpa's mask for the calls it hands to sdpa."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, attention_forward)
    AttentionMaskInterface.register(NAME, sdpa_mask)
