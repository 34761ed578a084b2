"""
The char CNN's max-pooling in inference: `amax` (now) against `torch.max(..., dim=1)[0]` (before),
interleaved in one process, over two batches of 64 WikiText-2 sentences with the original
architecture's random weights; also checks that the outputs are bit-identical.

    python benchmarks/max_pool_ab.py
"""
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

torch.set_num_threads(2)
sys.path.insert(0, "benchmarks")
from embed_speed import sentences, SHARED  # noqa: E402
# The repository root, for the tests' random-weight helper.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from elmo_plugin import ElmoBiLm, batch_to_ids
from elmo_plugin.modules import char_encoder
from elmo_plugin.weights.pretrained import ORIGINAL_OPTIONS
from tests.random_weights import write_random_elmo  # noqa: E402
o, wf = write_random_elmo(tempfile.mkdtemp(), ORIGINAL_OPTIONS, seed=0)
bilm = ElmoBiLm(o, wf).eval()
data = sentences(128, SHARED / "data" / "lm_eval" / "wikitext2.valid.txt")
batches = [batch_to_ids(data[i:i+64]) for i in (0, 64)]
new = char_encoder.ElmoCharacterEncoder._convolve_and_max_pool
def old(self, characters, convolution):
    num_tokens, _, char_dim = characters.shape
    width = convolution.kernel_size[0]
    windows = characters.unfold(1, width, 1)
    product = self.kernels.product(char_encoder.Role.CHAR_CNN, convolution)
    products = product(windows.reshape(num_tokens, windows.size(1), char_dim * width))
    return torch.max(products, dim=1)[0]
res = {"max (before)": [], "amax (after)": []}
outs = {}
for _ in range(4):
    for name, f in (("max (before)", old), ("amax (after)", new)):
        char_encoder.ElmoCharacterEncoder._convolve_and_max_pool = f
        bilm.reset_states()
        s = time.perf_counter()
        with torch.no_grad():
            outs[name] = [bilm(b)["activations"][2] for b in batches]
        res[name].append(time.perf_counter() - s)
print({k: round(statistics.median(v), 3) for k, v in res.items()}, "equal:", all(torch.equal(a, b) for a, b in zip(*outs.values())))
