# The steps the recording scripts' workloads share (validation/workloads.py,
# varshape/workloads.py): seeding, random-shape token inference, greedy generation at fixed
# shapes, one optimizer step, and plugging a workload into record_trace.py's recorder.
# Each keeps the order of its random draws, so a workload records the same trace through it.
import os, random, sys, torch

def step_limits(env):
    """`(steps, capped)` for a workload script: `steps(n)` is `range(n)` and `capped(shapes)`
    is `shapes`, both cut to the integer in the environment variable `env` when it is set (a
    check run, never a recording)."""
    cap = int(os.environ.get(env, "0"))
    return (lambda n: range(min(n, cap) if cap else n)), (lambda shapes: shapes[:cap] if cap else shapes)

def seeded_cuda():
    """Seeds torch and random with 0; returns the CUDA device."""
    torch.manual_seed(0); random.seed(0)
    return torch.device("cuda")

def infer_random_tokens(m, dev, steps, batch, seq, vocab):
    """`steps` no-grad forwards of `m` on random token ids, each of a random batch size in
    `batch` and sequence length in `seq` (inclusive (low, high) pairs)."""
    with torch.no_grad():
        for _ in range(steps):
            b = random.randint(*batch); s = random.randint(*seq)
            m(torch.randint(0, vocab, (b, s), device=dev))

def infer_random_images(m, dev, steps, batch, resolutions):
    """`steps` no-grad forwards of `m` on random square images, each of a random batch size
    in `batch` (inclusive (low, high)) at a resolution drawn from `resolutions`."""
    with torch.no_grad():
        for _ in range(steps):
            b = random.randint(*batch); r = random.choice(resolutions)
            m(torch.randn(b, 3, r, r, device=dev))

def detect_random_images(m, dev, steps, images, side):
    """`steps` no-grad forwards of detection model `m` on lists of random images: a random
    count in `images`, each of random height and width in `side` (inclusive pairs)."""
    with torch.no_grad():
        for _ in range(steps):
            b = random.randint(*images)
            m([torch.rand(3, random.randint(*side), random.randint(*side), device=dev) for _ in range(b)])

def detect_untrained(model, dev, steps, images, side):
    """Builds torchvision's detection model `model` (e.g. "fasterrcnn_resnet50_fpn") without
    pretrained weights, in eval mode on `dev`, and runs `detect_random_images` on it."""
    import torchvision
    m = getattr(torchvision.models.detection, model)(weights=None, weights_backbone=None).to(dev).eval()
    detect_random_images(m, dev, steps, images, side)

def generate_fixed(m, dev, shapes, vocab, new_tokens, **kwargs):
    """Greedy generation of exactly `new_tokens` tokens by `m` for each (batch, prompt length)
    of `shapes`, on random prompts; `kwargs` go to `m.generate`."""
    for b, p in shapes:
        x = torch.randint(0, vocab, (b, p), device=dev)
        with torch.no_grad():
            m.generate(x, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, **kwargs)

def optimizer_step(loss, opt):
    """Backward of `loss`, one step of `opt`, gradients dropped."""
    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)

def record_main(run):
    """Runs `run(name)` under record_trace.py's recorder: argv is the workload and the output.
    The device is synchronized after `run` (in the timed run, as record_trace.py's own
    workloads do); scripts that synchronize themselves repeat a no-op."""
    import record_trace as rt
    def run_synchronized(name):
        run(name)
        torch.cuda.synchronize()
    rt.run_workload = run_synchronized
    rt.main(sys.argv[1], sys.argv[2])
