"""
Silences warnings that the pinned AllenNLP stack prints on every start and that are known to
be harmless. This is the only place that filters warnings; each filter says why it is safe.

It must run before `allennlp` imports its dependencies, which happens before any plugin is
loaded, so `elmo_plugin.pth` (which `make install` copies into the environment's
site-packages and the wheel carries; Python runs `.pth` import lines at start-up) imports it;
`import elmo_plugin` also installs the filters, for environments without that file.
"""
import warnings

# torchvision 0.15.2 is the last release AllenNLP 2.10 accepts; only `import torchvision` is
# needed (by allennlp.data.image_loader), and its C image extension, built for torch 2.0, cannot
# load on torch 2.13. AllenNLP's image loading is never used by ELMo.
warnings.filterwarnings(
    "ignore", message="Failed to load image Python extension", category=UserWarning
)

# allennlp-models loads py-rouge, which imports pkg_resources for a data file; setuptools 80
# (pinned because it still has pkg_resources) warns that the API is deprecated.
warnings.filterwarnings("ignore", message="pkg_resources is deprecated", category=UserWarning)

# AllenNLP 2.10's trainer calls torch.cuda.amp.autocast(enabled=False) around every batch even
# on CPU; torch 2.x deprecated that spelling for torch.amp.autocast("cuda"). Same behaviour.
warnings.filterwarnings(
    "ignore", message=r"`torch\.cuda\.amp\.autocast\(args\.\.\.\)` is deprecated", category=FutureWarning
)

# The opt-in int8 ELMo precision (elmo_plugin/kernels/reduced_precision.py) builds FBGEMM's
# prepacked int8 weights from a per-channel quantised tensor; torch 2.13 still supports that
# path but warns that quantised tensor types will move to torchao in a future release. The
# pinned torch is 2.13; the int8 path's test fails loudly the day the API goes.
warnings.filterwarnings(
    "ignore", message=r"torch\.quantize_per_tensor, torch\.quantize_per_channel", category=UserWarning
)
