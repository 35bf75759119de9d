"""Serves a Python oracle script to the tests with its imports done once (tests/runtime/oracle_client.h).

  oracle_server.py SOCKET SCRIPT IDLE_S

Imports SCRIPT as a module, which imports what the oracle needs (torch and transformers take 2-4 s
of CPU per process), then listens on the Unix socket SOCKET. Each request is one line of JSON,
{"argv": [...], "log": PATH, "append": BOOL}; the server forks, and the child, with stdout and
stderr on PATH, runs SCRIPT's main(argv) as a fresh `python SCRIPT argv...` would, then answers
one line: the exit status. Each request has its own process, so nothing one request does (seeds,
caches, loaded models) is seen by another, and requests run side by side.

Exits when no request came for IDLE_S seconds, removing SOCKET, or at once with the status SCRIPT's
import exits with (77: the oracle's packages are missing; the tests then skip).
"""
import importlib.util
import json
import os
import socketserver
import sys
import time


def load(script):
    spec = importlib.util.spec_from_file_location("oracle", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # SystemExit(77) propagates: the packages are missing
    return module


class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        # Runs in the child that ForkingMixIn made for this request.
        line = self.rfile.readline()
        if not line.strip():
            return  # a probe: the client that started the server checks that it accepts
        request = json.loads(line)
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT |
                     (os.O_APPEND if request.get("append") else os.O_TRUNC), 0o644)
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        try:
            status = self.server.module.main(request["argv"])
            status = 0 if status is None else int(status)
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # the traceback goes to the log, as for a fresh process
            import traceback
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        self.wfile.write(f"{status}\n".encode())
        self.wfile.flush()


class Server(socketserver.ForkingMixIn, socketserver.UnixStreamServer):
    def process_request(self, request, client_address):
        self.last = time.monotonic()  # in the server, before it forks the request's child
        super().process_request(request, client_address)


def main(argv):
    sock, script, idle_s = argv[1], argv[2], float(argv[3])
    module = load(script)
    if os.path.exists(sock):
        os.unlink(sock)
    server = Server(sock, Handler)
    server.module = module
    server.last = time.monotonic()
    server.timeout = 0.5
    try:
        while True:
            server.handle_request()
            server.collect_children()
            if server.active_children:
                server.last = time.monotonic()
            elif time.monotonic() - server.last > idle_s:
                break
    finally:
        try:
            os.unlink(sock)
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
