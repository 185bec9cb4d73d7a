"""`lenscope ARGS` from a shell, run by the test process that serves it (tests/doc_shell.py): stdlib only, so fast.

It sends its argv, working directory and environment over the Unix socket named in $LENSCOPE_TEST_CLI_SOCKET,
writes the stdout and stderr that come back and exits with the command's exit code. Standard input is not passed.
"""

import base64
import json
import os
import socket
import sys

with socket.socket(socket.AF_UNIX) as sock:
    sock.connect(os.environ["LENSCOPE_TEST_CLI_SOCKET"])
    sock.sendall(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}).encode())
    sock.shutdown(socket.SHUT_WR)
    reply = json.loads(b"".join(iter(lambda: sock.recv(1 << 16), b"")))
sys.stdout.buffer.write(base64.b64decode(reply["out"]))
sys.stderr.write(reply["err"])
sys.exit(reply["rc"])
