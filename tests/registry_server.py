"""A schema registry for the tests: the subset of Confluent's REST API that confluent-kafka's client uses here.

GET /schemas/ids/{id} (a schema by id, 404 with error_code 40403 when unknown) and POST /subjects/{subject}/versions
(register: the same schema text gets the same id under any subject, as Confluent's registry does), behind HTTP basic
auth when a user is given, over TLS when a certificate is. `down` makes every request a 503; `not_a_registry` a 404
with an HTML page, as a wrong URL answers; `trickle_s` sends each answer's body a byte at a time, that many seconds
apart; `requests` logs (method, path) of each one.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit


class RegistryServer:
    def __init__(self, user: tuple[str, str] | None = None, cert: tuple[Path, Path] | None = None) -> None:
        self.schemas: dict[int, dict] = {}  # id -> {"schema": text, "schemaType": ...}
        self.ids: dict[str, int] = {}  # schema text -> id
        self.subjects: dict[str, list[int]] = {}
        self.requests: list[tuple[str, str]] = []
        self.down = False
        self.not_a_registry = False
        self.trickle_s: float | None = None
        self._user = user
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        scheme = "http"
        if cert is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(cert[0]), str(cert[1]))
            self._http.socket = context.wrap_socket(self._http.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://localhost:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def __enter__(self) -> RegistryServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()

    def add(self, schema: dict | str, schema_type: str | None = None, schema_id: int | None = None) -> int:
        """Put a schema in as another producer would (or at a chosen id); its id."""
        text = schema if isinstance(schema, str) else json.dumps(schema)
        with self._lock:
            found = self.ids.get(text)
            if found is None:
                found = schema_id if schema_id is not None else len(self.schemas) + 1
                self.ids[text] = found
                self.schemas[found] = {"schema": text, **({"schemaType": schema_type} if schema_type else {})}
            return found

    def authorised(self, header: str | None) -> bool:
        if self._user is None:
            return True
        expected = base64.b64encode(":".join(self._user).encode()).decode()
        return header == f"Basic {expected}"


def _handler(registry: RegistryServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            pass

        def _reply(self, status: int, body: dict | str) -> None:
            html = isinstance(body, str)
            data = body.encode() if html else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/html" if html else "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if registry.trickle_s is None:
                self.wfile.write(data)
                return
            try:
                for i in range(len(data)):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(registry.trickle_s)
            except OSError:  # the client gave up
                pass

        def _refused(self) -> bool:
            registry.requests.append((self.command, self.path))
            if registry.down:
                self._reply(503, {"error_code": 50301, "message": "down for the test"})
                return True
            if registry.not_a_registry:
                self._reply(404, "<html><body><h1>404 Not Found</h1></body></html>")
                return True
            if not registry.authorised(self.headers.get("Authorization")):
                self._reply(401, {"error_code": 401, "message": "Unauthorized"})
                return True
            return False

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self._refused():
                return
            parts = urlsplit(self.path).path.strip("/").split("/")
            if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                found = registry.schemas.get(int(parts[2]))
                if found is not None:
                    return self._reply(200, found)
                return self._reply(404, {"error_code": 40403, "message": f"Schema {parts[2]} not found"})
            self._reply(404, {"error_code": 404, "message": "not in this test server"})

        def do_POST(self) -> None:  # noqa: N802
            if self._refused():
                return
            parts = urlsplit(self.path).path.strip("/").split("/")
            if len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                schema_id = registry.add(body["schema"], body.get("schemaType"))
                registry.subjects.setdefault(unquote(parts[1]), []).append(schema_id)
                return self._reply(200, {"id": schema_id})
            self._reply(404, {"error_code": 404, "message": "not in this test server"})

    return Handler
