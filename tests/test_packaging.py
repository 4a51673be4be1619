"""pyproject.toml lists its packages by hand (the kernels install as `dsv4_kernels` from `kernels/`): a subpackage
missing from that list is left out of a wheel, and `import dsv4_kernels` then fails on every machine that did not
install the checkout in editable mode (it happened: `dsv4_kernels.sampling` was missing)."""
import os
import tomllib

from conftest import ROOT


def test_every_package_directory_is_listed_in_pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        tool = tomllib.load(f)["tool"]["setuptools"]
    listed, dirs = set(tool["packages"]), tool["package-dir"]
    found = set()
    for name in ("graphcheck", "dsv4_model", "dsv4_kernels"):
        top = os.path.join(ROOT, dirs.get(name, name))
        for here, subdirs, files in os.walk(top):
            subdirs[:] = [d for d in subdirs if d != "__pycache__"]
            if "__init__.py" in files:
                rel = os.path.relpath(here, top)
                found.add(name if rel == "." else f"{name}.{rel.replace(os.sep, '.')}")
    assert found - listed == set(), f"packages missing from pyproject.toml [tool.setuptools] packages: {found - listed}"
    def where(pkg):   # a listed package may be a data directory without __init__.py (graphcheck.schema)
        top, *rest = pkg.split(".")
        return os.path.join(ROOT, dirs.get(top, top), *rest)
    gone = {p for p in listed if not os.path.isdir(where(p))}
    assert gone == set(), f"pyproject.toml lists packages that do not exist: {gone}"
