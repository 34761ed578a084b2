"""
What may import what (README, "Architecture"): the package's layers, no import cycles, and
inference never importing training code. Read from the source with `ast`, so that an import
that breaks a rule fails here, whether or not a test runs the code that has it.
"""
import ast
from pathlib import Path
from typing import Dict, Iterator, Set

from tests.helpers import REPO_ROOT

PACKAGE = "elmo_plugin"

# Each layer may import its own modules and those of the layers listed (bottom to top).
ALLOWED_IMPORTS: Dict[str, Set[str]] = {
    "common": set(),
    "kernels": {"common"},
    "data": {"common"},
    "weights": {"common", "data"},
    "modules": {"common", "kernels", "data", "weights"},
    "inference": {"common", "kernels", "data", "weights", "modules"},
    "training": {"common", "data", "weights", "modules"},
    "models": {"common", "kernels", "data", "weights", "modules", "training"},
    "predictors": {"common", "data", "models"},
    "commands": {"common", "kernels", "data", "weights", "modules", "inference", "models", "training"},
    "compat": {"common", "kernels", "data", "weights", "modules", "inference"},
    "demo": {"common"},
}
# The plugin's entry points register everything, so they may import anything.
TOP_LEVEL = {PACKAGE, f"{PACKAGE}.__main__"}
# Training code: what loading and running a pre-trained biLM never needs.
TRAINING_CODE = (
    f"{PACKAGE}.data.bilm_corpus_reader",
    f"{PACKAGE}.data.bilm_window_loader",
    f"{PACKAGE}.data.bilm_vocabulary",
    f"{PACKAGE}.models",
    f"{PACKAGE}.training",
    f"{PACKAGE}.predictors",
)
INFERENCE_LAYERS = ("kernels", "data", "weights", "modules", "inference", "compat")


def module_files() -> Dict[str, Path]:
    files = {}
    for path in sorted((REPO_ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts)] = path
    return files


MODULES = module_files()


def _package_of(module: str) -> str:
    is_package = MODULES[module].name == "__init__.py"
    return module if is_package else module.rpartition(".")[0]


def imported_modules(module: str) -> Iterator[str]:
    """The package's modules that `module` imports anywhere in its source (functions too)."""
    source = MODULES[module].read_text(encoding="utf-8")
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = _package_of(module).split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from package import name`: the submodule `name` if there is one.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target.startswith(PACKAGE) and target != module:
                yield target
    if "pkgutil.iter_modules(__path__)" in source:  # a package that imports all its modules
        yield from (name for name in MODULES if name.rpartition(".")[0] == module)


IMPORTS = {module: set(imported_modules(module)) for module in MODULES}


def layer_of(module: str) -> str:
    return module.split(".")[1]


def test_every_layer_imports_only_the_layers_below_it():
    assert set(ALLOWED_IMPORTS) >= {layer_of(m) for m in MODULES if m not in TOP_LEVEL}
    broken = sorted(
        f"{module} imports {target}"
        for module, targets in IMPORTS.items()
        if module not in TOP_LEVEL
        for target in targets
        if target != PACKAGE
        and layer_of(target) != layer_of(module)
        and layer_of(target) not in ALLOWED_IMPORTS[layer_of(module)]
    )
    assert not broken, broken


def test_no_module_imports_the_top_level_package():
    # `import elmo_plugin` registers everything: a module below it must name what it uses.
    assert not [m for m, targets in IMPORTS.items() if m not in TOP_LEVEL and PACKAGE in targets]


def test_there_are_no_import_cycles():
    # Tarjan's strongly connected components over the explicit imports.
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack, on_stack, cycles = [], set(), []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in IMPORTS[module]:
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in MODULES:
        if module not in index and module not in TOP_LEVEL:
            visit(module)
    assert not cycles, cycles


def loaded_with(module: str) -> Set[str]:
    """Every module of the package that importing `module` runs (its packages' `__init__`
    too, except the top-level one, which registers everything by design)."""
    seen: Set[str] = set()
    pending = [module]
    while pending:
        current = pending.pop()
        if current in seen or current == PACKAGE:
            continue
        seen.add(current)
        pending.extend(IMPORTS[current])
        parent = current.rpartition(".")[0]
        while parent:
            pending.append(parent)
            parent = parent.rpartition(".")[0]
    return seen


def test_inference_does_not_import_training_code():
    leaks = {
        module: sorted(m for m in loaded_with(module) if m.startswith(TRAINING_CODE))
        for module in MODULES
        if module not in TOP_LEVEL
        and layer_of(module) in INFERENCE_LAYERS
        and not module.startswith(TRAINING_CODE)
    }
    assert not {module: found for module, found in leaks.items() if found}


def test_the_rules_see_real_imports():
    # Guards the parser: a known import of each kind is found.
    assert f"{PACKAGE}.kernels.products" in IMPORTS[f"{PACKAGE}.modules.elmo_lstm"]
    assert f"{PACKAGE}.weights.layout" in IMPORTS[f"{PACKAGE}.modules.char_encoder"]
    assert f"{PACKAGE}.weights.formats.published" in IMPORTS[f"{PACKAGE}.weights.formats"]
    assert f"{PACKAGE}.data.bilm_corpus_reader" in loaded_with(f"{PACKAGE}.models.bilm")
