# Validation workloads for the allocation policy (issue 15): recorded with record_trace.py's
# machinery, designed without looking at how any policy does on them.
import sys, random, torch
import record_trace as rt

def run(name):
    torch.manual_seed(0); random.seed(0)
    dev = torch.device("cuda")
    if name == "vit_train":
        import torchvision
        m = torchvision.models.vit_b_16().to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        for step in range(3):
            x = torch.randn(32, 3, 224, 224, device=dev); y = torch.randint(0, 1000, (32,), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    elif name == "resnet34_multires_train":
        import torchvision
        m = torchvision.models.resnet34().to(dev)
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        for r in [160, 224, 288, 224, 160, 288]:
            x = torch.randn(32, 3, r, r, device=dev); y = torch.randint(0, 1000, (32,), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(m(x), y)
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    elif name == "gpt2_generate_varbatch":
        from transformers import GPT2Config, GPT2LMHeadModel
        m = GPT2LMHeadModel(GPT2Config()).to(dev, dtype=torch.bfloat16).eval()
        for b, p in [(1, 32), (8, 100), (32, 20), (4, 300)]:
            x = torch.randint(0, 50257, (b, p), device=dev)
            with torch.no_grad():
                m.generate(x, max_new_tokens=64, min_new_tokens=64, do_sample=False, pad_token_id=0)
    elif name == "distilbert_varlen_infer":
        from transformers import DistilBertConfig, DistilBertModel
        m = DistilBertModel(DistilBertConfig()).to(dev).eval()
        with torch.no_grad():
            for i in range(50):
                b = random.randint(1, 64); s = random.randint(8, 384)
                m(torch.randint(0, 30000, (b, s), device=dev))
    elif name == "t5_train_varlen":
        from transformers import T5Config, T5ForConditionalGeneration
        m = T5ForConditionalGeneration(T5Config(num_layers=6, d_model=512, d_ff=2048, num_heads=8)).to(dev)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        for step in range(6):
            b = random.choice([8, 16, 32]); s = random.choice([64, 128, 256]); t = random.choice([32, 64, 128])
            x = torch.randint(0, 32000, (b, s), device=dev); y = torch.randint(0, 32000, (b, t), device=dev)
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = m(input_ids=x, labels=y).loss
            loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
    else:
        raise SystemExit("unknown workload " + name)
    torch.cuda.synchronize()

rt.run_workload = run
if __name__ == "__main__":
    rt.main(sys.argv[1], sys.argv[2])
