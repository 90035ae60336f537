"""A tiny synchronous REST client for tests that must see exact status codes and headers."""
import json
import urllib.error
import urllib.request
from dataclasses import dataclass


@dataclass
class Reply:
    status: int
    body: object
    headers: dict

    @property
    def message(self) -> str:
        return self.body.get('message', '') if isinstance(self.body, dict) else ''


class Rest:
    def __init__(self, url: str, token: str | None = None):
        self.url = url.rstrip('/')
        self.auth = {'Authorization': f'Bearer {token}'} if token else {}  # none: anonymous, as with no kubeconfig user

    def call(self, method: str, path: str, body: object = None, content_type: str = 'application/json',
             headers: dict | None = None) -> Reply:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={'Content-Type': content_type, **self.auth, **(headers or {})})
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # an answer ends it; only a hung one fails
                return Reply(response.status, _decode(response.read()), dict(response.headers))
        except urllib.error.HTTPError as error:
            return Reply(error.code, _decode(error.read()), dict(error.headers))

    def get(self, path: str, **kwargs) -> Reply:
        return self.call('GET', path, **kwargs)

    def post(self, path: str, body: object, **kwargs) -> Reply:
        return self.call('POST', path, body, **kwargs)

    def put(self, path: str, body: object, **kwargs) -> Reply:
        return self.call('PUT', path, body, **kwargs)

    def patch(self, path: str, body: object, content_type: str = 'application/merge-patch+json', **kwargs) -> Reply:
        return self.call('PATCH', path, body, content_type=content_type, **kwargs)

    def delete(self, path: str, body: object = None, **kwargs) -> Reply:
        return self.call('DELETE', path, body, **kwargs)

    def watch(self, path: str, timeout: float = 5.0) -> list[dict]:
        """Read a watch stream until the server closes it (pass timeoutSeconds in the path's query)."""
        request = urllib.request.Request(self.url + path, headers=self.auth)
        events = []
        with urllib.request.urlopen(request, timeout=timeout + 5) as response:
            assert response.headers.get('Content-Type', '').startswith('application/json'), response.headers
            for line in response:
                if line.strip():
                    events.append(json.loads(line))
        return events


def _decode(raw: bytes) -> object:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors='replace')
