# Validation workloads for the allocation policy (issue 15): recorded with record_trace.py's
# machinery, designed without looking at how any policy does on them.
import os, random, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from workload_steps import generate_fixed, infer_random_tokens, optimizer_step, record_main, seeded_cuda

def run(name):
    dev = seeded_cuda()
    if name == "vit_train":
        import torchvision
        m = torchvision.models.vit_b_16().to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        for step in range(3):
            x = torch.randn(32, 3, 224, 224, device=dev); y = torch.randint(0, 1000, (32,), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(m(x), y)
            optimizer_step(loss, opt)
    elif name == "resnet34_multires_train":
        import torchvision
        m = torchvision.models.resnet34().to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        for r in [160, 224, 288, 224, 160, 288]:
            x = torch.randn(32, 3, r, r, device=dev); y = torch.randint(0, 1000, (32,), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(m(x), y)
            optimizer_step(loss, opt)
    elif name == "gpt2_generate_varbatch":
        from transformers import GPT2Config, GPT2LMHeadModel
        m = GPT2LMHeadModel(GPT2Config()).to(dev, dtype=torch.bfloat16).eval()
        generate_fixed(m, dev, [(1, 32), (8, 100), (32, 20), (4, 300)], vocab=50257, new_tokens=64, pad_token_id=0)
    elif name == "distilbert_varlen_infer":
        from transformers import DistilBertConfig, DistilBertModel
        m = DistilBertModel(DistilBertConfig()).to(dev).eval()
        infer_random_tokens(m, dev, 50, batch=(1, 64), seq=(8, 384), vocab=30000)
    elif name == "t5_train_varlen":
        from transformers import T5Config, T5ForConditionalGeneration
        m = T5ForConditionalGeneration(T5Config(num_layers=6, d_model=512, d_ff=2048, num_heads=8)).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        for step in range(6):
            b = random.choice([8, 16, 32]); s = random.choice([64, 128, 256]); t = random.choice([32, 64, 128])
            x = torch.randint(0, 32000, (b, s), device=dev); y = torch.randint(0, 32000, (b, t), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(input_ids=x, labels=y).loss
            optimizer_step(loss, opt)
    else:
        raise SystemExit("unknown workload " + name)
    torch.cuda.synchronize()

if __name__ == "__main__":
    record_main(run)
