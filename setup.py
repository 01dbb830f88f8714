"""The optional C extension (atbprof/importers/native_src: the Kineto scanner and framework-op nesting). Everything
else is in pyproject.toml; the extension is declared here because setuptools' pyproject table for extensions is
still experimental (and warns). Without a C compiler the install goes on, and the importers take their pure-Python
paths (~2x slower; scripts/bench_analyze.py says how much)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "atbprof.importers._native",
            sources=[
                "atbprof/importers/native_src/module.c",
                "atbprof/importers/native_src/scan.c",
                "atbprof/importers/native_src/nest.c",
                "atbprof/importers/native_src/stream.c",
            ],
            depends=[
                "atbprof/importers/native_src/lex.h",
                "atbprof/importers/native_src/intern.h",
                "atbprof/importers/native_src/stream.h",
            ],
            extra_compile_args=["-O3"],
            optional=True,
        )
    ]
)
