"""What the kubernetes client's call_api gives the collection's JsonApi: a response's data, and the API error."""

from __future__ import annotations

import json


class Response:
    def __init__(self, data):
        self.data = json.dumps(data).encode() if data is not None else b""


class ApiException(Exception):
    def __init__(self, status, message):
        super().__init__(message)
        self.status = status
        self.body = json.dumps({"message": message})
