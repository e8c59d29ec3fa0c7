"""Reproducer of the open training abort (GPU only): GPT-2 (2 layers) and a
ViT-tiny training step through mybackend, under several option sets, each in
a fresh process. On an H100 (2026-11-22) every variant died with SIGABRT
(rc -6) in the backward graph's run, engines on or off; see
docs/performance.md, "Known failures".

    python tools/repro_training_abort.py
"""

import json
import os
import subprocess
import sys

CASE = r"""
import sys, json, torch
opts = json.loads(sys.argv[1]); which = sys.argv[2]
torch.manual_seed(0)
if which == "gpt2":
    from transformers import GPT2Config, GPT2LMHeadModel
    m = GPT2LMHeadModel(GPT2Config(n_layer=2)).cuda()
    x = torch.randint(0, 50000, (2, 256), device="cuda")
    f = lambda mm: mm(x).logits.float().square().mean()
else:
    import timm
    m = timm.create_model("vit_tiny_patch16_224").cuda()
    x = torch.randn(2, 3, 224, 224, device="cuda")
    f = lambda mm: mm(x).float().square().mean()
c = torch.compile(m, backend="mybackend", options=opts)
with torch.autocast("cuda", dtype=torch.bfloat16):
    for _ in range(2):
        f(c).backward()
torch.cuda.synchronize()
print("OK")
"""
variants = {
    "default": {},
    "no_generated": {"generated_kernels": False},
    "no_cublaslt": {"cublaslt": False},
    "no_cudnn": {"cudnn": False},
    "attention_off_class": {"disabled_op_classes": ["attention"]},
}
for which in ("gpt2", "vit"):
    for name, o in variants.items():
        env = dict(os.environ, CUDA_LAUNCH_BLOCKING="1")
        p = subprocess.run(
            [sys.executable, "-c", CASE, json.dumps(o), which],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        err = [l for l in (p.stderr or "").splitlines() if "Error" in l or "error" in l][-2:]
        print(which, name, "rc", p.returncode, (p.stdout or "").strip()[-20:], err, flush=True)
