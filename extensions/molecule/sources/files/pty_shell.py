"""An interactive bash on a pseudo-terminal that starts one GPU holder in the foreground.

Usage: pty_shell.py GPU TITLE. Prints the shell's pid once the holder holds
its memory, and keeps the terminal's master side open until killed.
"""
import os
import pty
import sys
import time

gpu, title = sys.argv[1], sys.argv[2]
pid, master = pty.fork()
if pid == 0:
    os.execvp('bash', ['bash', '--norc', '--noprofile', '-i'])
command = 'exec 2>/dev/null; python3 /usr/local/lib/gpusim/gpusim.py _hold --gpu %s --mib 4096 --title %s\n' % (
    gpu, title)
time.sleep(0.3)
os.write(master, command.encode())
sys.stdout.write('%d\n' % pid)
sys.stdout.flush()
os.close(1)
while True:
    try:
        os.read(master, 4096)
    except OSError:
        time.sleep(1)
