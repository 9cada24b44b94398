"""model.attn_implementation=varlen on CUDA (rlvr.model.varlen), checked and timed; prints a table.

The same rows scored two ways by a random Qwen2 model with the attention of the Qwen2.5-1.5B shape
(12 query heads, 2 key/value heads, head dim 128), bf16:
  padded        sdpa over a padded batch with its attention mask (the reference);
  padding-free  the rows concatenated into one row whose position ids restart at each row, through
                ``varlen`` (torch's varlen flash kernel), and through ``sdpa`` (its block-diagonal mask);
  control       the padding-free row with position ids that do not restart (the rows see each other):
                the check must fail there, or it proves nothing.
Per-token log-probabilities and the gradients of the mean token loss are compared with the padded
reference; then a forward and backward of the padding-free row is timed under each attention.

Usage (a CUDA machine): python benchmarks/varlen_check.py [--rows 48] [--layers 4] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
DEVICE = "cuda"


def model(attention: str, layers: int) -> torch.nn.Module:
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from rlvr.model import varlen

    varlen.register()
    config = Qwen2Config(vocab_size=8192, hidden_size=1536, intermediate_size=8960, num_hidden_layers=layers,
                         num_attention_heads=12, num_key_value_heads=2, max_position_embeddings=4096,
                         attn_implementation=attention)  # fmt: skip
    torch.manual_seed(0)
    return Qwen2ForCausalLM(config).to(DEVICE, torch.bfloat16)


def token_logprobs(net: torch.nn.Module, ids: torch.Tensor, **inputs) -> torch.Tensor:
    logits = net(input_ids=ids, use_cache=False, **inputs).logits.float()
    return torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None])[..., 0]


def padded(net, rows):
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long, device=DEVICE)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = r, 1
    lp = token_logprobs(net, ids, attention_mask=mask)
    return torch.cat([lp[i, : len(r) - 1] for i, r in enumerate(rows)])


def padding_free(net, rows, restart: bool = True):
    ids = torch.cat(rows)[None]
    positions = torch.cat([torch.arange(len(r)) for r in rows]) if restart else torch.arange(ids.shape[1])
    lp = token_logprobs(net, ids, position_ids=positions[None].to(DEVICE))[0]
    starts = torch.tensor([0] + [len(r) for r in rows]).cumsum(0)
    return torch.cat([lp[s : e - 1] for s, e in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True)])


def scored(net, rows, how, **kw):
    net.zero_grad(set_to_none=True)
    lp = how(net, rows, **kw)
    (-lp.mean()).backward()
    grads = torch.cat([p.grad.float().flatten() for p in net.parameters() if p.grad is not None])
    return lp.detach(), grads


def sync() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def timed(net, rows, repeats: int = 5) -> float:
    for _ in range(2):
        scored(net, rows, padding_free)
    sync()
    start = time.perf_counter()
    for _ in range(repeats):
        scored(net, rows, padding_free)
    sync()
    return (time.perf_counter() - start) / repeats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=48)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--device", default="cuda", help="cpu: a dry run (varlen is sdpa there)")
    args = parser.parse_args()
    global DEVICE
    DEVICE = args.device
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(16, 320, (args.rows,), generator=generator).tolist()
    rows = [torch.randint(0, 8192, (n,), generator=generator).to(DEVICE) for n in lengths]
    reference = {}
    results = []
    for attention in ("sdpa", "varlen"):
        net = model(attention, args.layers)
        if attention == "sdpa":
            reference["lp"], reference["grad"] = scored(net, rows, padded)
        cases = [("padding-free", {}), ("control: positions do not restart", {"restart": False})]
        for name, kw in cases:
            lp, grad = scored(net, rows, padding_free, **kw)
            results.append({
                "attention": attention, "batch": name,
                "max_logprob_diff": (lp - reference["lp"]).abs().max().item(),
                "loss_diff": (lp.mean() - reference["lp"].mean()).abs().item(),
                "grad_rel_diff": ((grad - reference["grad"]).norm() / reference["grad"].norm()).item(),
            })  # fmt: skip
        results[-2]["seconds_fwd_bwd"] = timed(net, rows)
        del net
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    tokens = sum(lengths)
    print(f"# varlen check: {args.rows} rows, {tokens} tokens, {args.layers} layers of the Qwen2.5-1.5B "
          f"attention, bf16, {torch.cuda.get_device_name() if DEVICE == 'cuda' else DEVICE}, torch {torch.__version__}\n")  # fmt: skip
    print(
        "| attention | padding-free batch | max |logprob diff| | loss diff | grad rel diff | fwd+bwd (ms) |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for r in results:
        ms = f"{1000 * r['seconds_fwd_bwd']:.1f}" if "seconds_fwd_bwd" in r else "-"
        print(f"| {r['attention']} | {r['batch']} | {r['max_logprob_diff']:.4f} | {r['loss_diff']:.2e} | "
              f"{r['grad_rel_diff']:.4f} | {ms} |")  # fmt: skip
    ok = {r["attention"]: r for r in results if r["batch"] == "padding-free"}
    control = [r for r in results if r["batch"] != "padding-free"]
    # bf16 noise: the padded and padding-free sums differ in order; rows that see each other move
    # the loss by far more (the control), so the check separates the two.
    agrees = all(r["loss_diff"] < 0.01 and r["grad_rel_diff"] < 0.05 for r in ok.values())
    control_fails = all(r["loss_diff"] > 0.05 or r["grad_rel_diff"] > 0.2 for r in control)
    print(f"\nvarlen agrees with padded sdpa: {agrees}; the control differs: {control_fails}")
    if args.json:
        args.json.write_text(json.dumps({"tokens": tokens, "rows": args.rows, "results": results,
                                         "agrees": agrees, "control_fails": control_fails}, indent=1))  # fmt: skip
    return 0 if agrees and control_fails else 1


if __name__ == "__main__":
    sys.exit(main())
