"""Guards a Python subprocess started by the tests (tests/socket_guard.py): Python imports
`sitecustomize` at startup from $PYTHONPATH, where tests/conftest.py puts this folder.
Outside the tests ($YUNQUE_TEST_SOCKET_GUARD unset) it does nothing but hand over to any
other sitecustomize."""

import os
import sys


def _guard() -> None:
    attempts = os.environ.get("YUNQUE_TEST_SOCKET_GUARD")
    if not attempts:
        return
    import importlib.util

    name = "_yunque_socket_guard"
    try:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "socket_guard.py")
        spec = importlib.util.spec_from_file_location(name, path)
        guard = importlib.util.module_from_spec(spec)
        sys.modules[name] = guard
        spec.loader.exec_module(guard)
        guard.install(guard.file_sink(attempts))
        guard.patch_popen(attempts)
    except Exception as e:  # noqa: BLE001 - an unguarded child must not pass unnoticed: its test fails
        import json

        with open(attempts, "a", encoding="utf-8") as f:
            f.write(json.dumps({"what": f"socket guard not installed: {e!r}", "pid": os.getpid(),
                                "argv": sys.argv[:4]}) + "\n")


def _chain() -> None:
    """Run the sitecustomize this one shadows, if there is one (a virtualenv or a distro's)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_guard()
_chain()
