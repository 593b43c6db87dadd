"""Builds libringreduce.so with CMake (from the repository this directory is in) and puts it
inside the package, so `pip install --no-build-isolation ./python` gives a package that
needs nothing else. RINGREDUCE_LIBRARY=/path/to/libringreduce.so uses that file instead,
RINGREDUCE_CMAKE_ARGS adds CMake options (e.g. -DRR_CUDA=OFF), and RINGREDUCE_SOURCE names
the source tree when this directory was copied out of it."""

import glob
import os
import shlex
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "ringreduce", "lib")
        os.makedirs(dest, exist_ok=True)
        given = os.environ.get("RINGREDUCE_LIBRARY")
        if given:
            shutil.copy2(given, os.path.join(dest, "libringreduce.so"))
            return
        src = os.environ.get("RINGREDUCE_SOURCE") or os.path.dirname(HERE)
        if not os.path.exists(os.path.join(src, "CMakeLists.txt")):
            raise RuntimeError("setup.py: no ringreduce source tree above python/ and no "
                               "RINGREDUCE_LIBRARY: nothing to package")
        with tempfile.TemporaryDirectory() as build:
            args = ["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                    "-DRR_BUILD_TESTS=OFF"] + shlex.split(os.environ.get("RINGREDUCE_CMAKE_ARGS", ""))
            subprocess.check_call(args)
            subprocess.check_call(["cmake", "--build", build, "--target", "ringreduce", "-j",
                                   str(os.cpu_count() or 1)])
            # The real file under the SONAME's name: what a dlopen of the .so finds.
            real = [p for p in glob.glob(os.path.join(build, "libringreduce.so.*.*"))]
            if not real:
                raise RuntimeError("setup.py: the CMake build made no libringreduce.so")
            shutil.copy2(real[0], os.path.join(dest, "libringreduce.so"))


setup(cmdclass={"build_py": BuildWithLibrary})
