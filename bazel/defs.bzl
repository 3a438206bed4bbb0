"""jax_py_test: one py_test per jax version, each in its own venv."""

# The venvs scripts/bazel_test.sh makes: .venvs/test-jax-<version>, with the
# patch series applied by the migration tool. Keep this on one line: the
# script reads it.
JAX_VERSIONS = ["0.12.0.1", "0.11.2", "0.10.2", "0.9.2", "0.8.3", "0.7.2"]

# The releases of JAX_VERSIONS whose series are maintenance-only (0.7.2 to
# 0.9.2: patches 0001 to 0006, bug fixes only).
MAINTENANCE_ONLY_VERSIONS = ["0.9.2", "0.8.3", "0.7.2"]

def jax_version_suffix(version):
    """Returns the target name suffix of a jax version: jax0_12_0_1."""
    return "jax" + version.replace(".", "_")

def jax_py_test(
        name,
        srcs = None,
        main = None,
        env = {},
        tags = [],
        versions = JAX_VERSIONS,
        **kwargs):
    """A py_test per version in `versions`, and a test_suite of them all.

    The tests are `<name>_jax0_12_0_1`, `<name>_jax0_11_2`, ...; each runs
    under .venvs/test-jax-<version>/bin/python (see python_dispatch.sh), with
    JAX_INTERPRET_PATCHES_TEST_VERSION=<version> for the migration tests.

    Args:
      name: the test_suite's name; `<name>.py` is the default source.
      srcs: the test's sources, by default `[name + ".py"]`.
      main: the file to run, by default the first of `srcs`.
      env: extra environment variables of every test.
      tags: tags of every test and of the suite.
      versions: the jax versions to test, by default all of JAX_VERSIONS
        (the tools' tests take only the newest, `JAX_VERSIONS[:1]`).
      **kwargs: passed on to each py_test (deps, data, size, ...).
    """
    srcs = srcs or [name + ".py"]
    main = main or srcs[0]
    tests = []
    for version in versions:
        test_name = "%s_%s" % (name, jax_version_suffix(version))
        native.py_test(
            name = test_name,
            srcs = srcs,
            main = main,
            python_version = "PY3",
            env = dict(
                env,
                JAX_TEST_PYTHON = ".venvs/test-jax-%s/bin/python" % version,
                JAX_INTERPRET_PATCHES_TEST_VERSION = version,
            ),
            tags = tags + [jax_version_suffix(version)],
            **kwargs
        )
        tests.append(":" + test_name)
    native.test_suite(
        name = name,
        tests = tests,
        tags = tags,
    )
