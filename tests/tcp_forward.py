"""A TCP port forwarding to a PostgreSQL Unix socket, with the network faults the deadline tests need.

``cut()`` stops every byte both ways and sends no reset (a partition); ``stall_after``
bytes from the client, the forwarder stops reading from the client for ``stall_s``
seconds while the server's answers still flow (a peer that acknowledges but does not
read: the client's send window fills).
"""

from __future__ import annotations

import select
import socket
import threading
import time
from pathlib import Path

JOIN_S = 20.0


class TcpForward:
    def __init__(self, target: Path, *, stall_after: int | None = None, stall_s: float = 0.0) -> None:
        self.target = str(target)
        self.stall_after, self.stall_s = stall_after, stall_s
        self.listener = socket.socket(socket.AF_INET)
        if stall_after is not None:
            # Small buffers (inherited by accepted sockets), so a stall fills the window at once.
            self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.stopping, self.silent = threading.Event(), threading.Event()
        self.sent = 0
        self.stall_until = 0.0
        self.stalled = False
        self.sockets: list[socket.socket] = []
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def cut(self) -> None:
        self.silent.set()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client = self.listener.accept()[0]
            except TimeoutError:
                continue
            server = socket.socket(socket.AF_UNIX)
            server.connect(self.target)
            self.sockets += [client, server]
            pump = threading.Thread(target=self._pump, args=(client, server), daemon=True)
            self.threads.append(pump)
            pump.start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        peer = {client: server, server: client}
        while not self.stopping.is_set():
            if self.silent.is_set():
                time.sleep(0.05)
                continue
            watch = [server] if time.monotonic() < self.stall_until else [client, server]
            for ready in select.select(watch, [], [], 0.1)[0]:
                try:
                    data = ready.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                peer[ready].sendall(data)
                if ready is client and self.stall_after is not None:
                    self.sent += len(data)
                    if self.sent >= self.stall_after and not self.stalled:
                        self.stalled = True
                        self.stall_until = time.monotonic() + self.stall_s

    def close(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(JOIN_S)
        for sock in [self.listener, *self.sockets]:
            sock.close()
