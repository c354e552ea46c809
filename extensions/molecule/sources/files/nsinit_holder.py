"""A GPU holder with the default SIGTERM disposition (no handler, not ignored).

Run as PID 1 of its own PID namespace (unshare --pid --fork), the kernel drops
a SIGTERM sent from outside the namespace: only SIGKILL ends it.
"""
import os
import signal
import sys

sys.path.insert(0, '/usr/local/lib/gpusim')
import gpusim  # noqa: E402  pylint: disable=wrong-import-position

_install = signal.signal


def keep_default_term(signum, handler):
    if signum == signal.SIGTERM:
        return _install(signum, signal.SIG_DFL)
    return _install(signum, handler)


signal.signal = keep_default_term
# Seen from inside its namespace it is pid 1; the stand-in NVML looks for its claim under the
# pid the host sees, which /proc/self names while /proc is the host's (no --mount-proc).
os.getpid = lambda: int(os.readlink('/proc/self'))
gpusim.main(['_hold'] + sys.argv[1:])
