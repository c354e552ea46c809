"""Stand-in for the pip bootstrap script that ansible-test downloads.

ansible-test fetches a copy of get-pip.py from a host that is not always
reachable. This script does the same job with the pip bundled in the Python
standard library (ensurepip), then installs the exact packages asked for
from the configured package index.
"""
import subprocess
import sys

ARGS = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"])
subprocess.check_call([sys.executable, "-m", "pip", "install"] + ARGS)
