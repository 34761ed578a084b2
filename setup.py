"""
Metadata is in setup.cfg. This file only makes the wheel carry `elmo_plugin.pth` at its root,
so that installing the wheel runs `elmo_plugin_warnings` and `elmo_plugin_import_hook` at
interpreter start-up (as `make install` does for the development environment).
"""
import os

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):  # `make install` places it for editable installs
            return
        self.copy_file("elmo_plugin.pth", os.path.join(self.build_lib, "elmo_plugin.pth"))


setup(cmdclass={"build_py": BuildPyWithPth})
