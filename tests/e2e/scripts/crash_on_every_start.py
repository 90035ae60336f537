"""A gang that can never start: rank 1 (NODE_RANK) crashes at once; rank 0 hangs as if waiting for it,
ignoring SIGTERM, with a child of its own, so only the kubelet's SIGKILL and the process-group kill end
it. The tests pass it with `python -c`, so it needs no volume."""
import os
import signal
import subprocess
import sys
import time

if os.environ["NODE_RANK"] == "1":
    sys.exit(3)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
time.sleep(300)
