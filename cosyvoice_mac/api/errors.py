"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}`` with the right HTTP status.

Every failure a client can cause or meet becomes an :class:`ApiError`; the handlers installed by
:func:`install_error_handlers` turn those, FastAPI's own body checks and any unexpected exception into
that JSON. A client never sees a traceback: an unexpected exception is logged here and answered with a
500 that says so.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

LOG = logging.getLogger("cosyvoice_mac.api")

# OpenAI's error types, by status.
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    409: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    503: "server_error",
    500: "server_error",
}

HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "too_large"}


class ApiError(Exception):
    """A request that cannot be served, with the status, the check that failed (``code``), the body
    field it concerns (``param``) and any headers the answer needs (``Retry-After``)."""

    def __init__(
        self, status: int, message: str, *, code: str, param: str | None = None, headers: dict[str, str] | None = None
    ):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = dict(headers or {})

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": ERROR_TYPES.get(self.status, "invalid_request_error"),
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, code: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, code=code, param=param)


def install_error_handlers(app: FastAPI, prefix: str) -> None:
    """Answer errors of paths under ``prefix`` in OpenAI's shape (other paths keep their own handlers)."""

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError):
        return error.response()

    @app.exception_handler(RequestValidationError)
    async def body_error(request: Request, error: RequestValidationError):
        return _describe_validation(error).response()

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException):
        if not request.url.path.startswith(prefix):
            return JSONResponse({"detail": error.detail}, status_code=error.status_code, headers=error.headers)
        code = HTTP_CODES.get(error.status_code, "http_error")
        return ApiError(error.status_code, str(error.detail), code=code, headers=error.headers).response()

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception):
        LOG.exception("unexpected error answering %s %s", request.method, request.url.path)
        if not request.url.path.startswith(prefix):
            return PlainTextResponse("Internal Server Error", status_code=500)
        return ApiError(
            500,
            f"the server failed on this request ({type(error).__name__}); the server log has the details",
            code="internal_error",
        ).response()


def _describe_validation(error: RequestValidationError) -> ApiError:
    """The first problem FastAPI found in the body, named by its field."""
    problems = error.errors()
    if not problems:
        return bad_request("the request body is not valid", "invalid_body")
    first = problems[0]
    location = [str(part) for part in first.get("loc", ()) if part not in ("body", "query", "path")]
    param = ".".join(location) or None
    kind = first.get("type", "")
    if kind == "missing":
        return bad_request(f"'{param}' is required", "missing_field", param)
    if kind == "extra_forbidden":
        return bad_request(
            f"'{param}' is not a parameter of this endpoint (no request may name a server-side file or setting)",
            "unknown_parameter",
            param,
        )
    if kind in ("json_invalid", "model_attributes_type"):
        return bad_request("the request body must be a JSON object", "invalid_json")
    return bad_request(f"'{param}': {first.get('msg', 'invalid value')}", "invalid_value", param)
