"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}`` with the right HTTP status.

Every failure a client can cause or meet becomes an :class:`ApiError`; the handlers installed by
:func:`install_error_handlers` turn those, FastAPI's own body checks, our own errors (``CosyVoiceError``:
logged as one line) and any unexpected exception into that JSON. A client never sees a traceback: an
unexpected exception is logged here with its traceback and answered with a 500 that says so. A failed job
is answered by whose fault it was (:func:`job_failure`): only the request's own fault is a 4xx.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from cosyvoice_mac.engine.messages import Failed, Fault
from cosyvoice_mac.errors import CosyVoiceError, InputError

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

    def event(self) -> dict:
        """The error as a stream's ``error`` event (its status line long gone): the body, and ``retry_after``
        (seconds) when a retry is expected to work."""
        retry = self.headers.get("Retry-After")
        return {"type": "error", **self.body(), **({"retry_after": int(retry)} if retry else {})}

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def bad_request(message: str, code: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, code=code, param=param)


def too_large_sentence(what: str, limit_bytes: int) -> str:
    """Every 413's sentence (a /v1 upload, a request body, a Gradio event's body, the key form): ``what`` was
    over the limit, and the limit (in MB, or KB below one MB), so the client knows how small to make it."""
    unit, size = ("MB", 1 << 20) if limit_bytes >= 1 << 20 else ("KB", 1 << 10)
    return f"{what} is larger than the limit of {limit_bytes / size:g} {unit}"


def too_large(what: str, limit_bytes: int, param: str | None = None) -> ApiError:
    """The 413 in OpenAI's shape (code ``too_large``), said by ``too_large_sentence``."""
    return ApiError(413, too_large_sentence(what, limit_bytes), code="too_large", param=param)


RESTART_RETRY_AFTER_S = 5  # a new model process is loading: about as long as a model that loads (model_loading)
UNAVAILABLE_RETRY_AFTER_S = 30
# Whose fault a failed job is (engine.messages.Fault) -> the HTTP status and code every /v1 answer gives it.
FAULT_ANSWERS = {
    Fault.INPUT: (400, "synthesis_refused"),  # the request's own fault: ``param`` names the field
    Fault.ENGINE: (500, "synthesis_failed"),  # the model failed on it: the server log has the details
    Fault.RESTARTED: (503, "engine_restarted"),  # the model process died mid-job and is back soon: retry
    Fault.TIMEOUT: (500, "job_timeout"),  # it ran past the server's limit for one job
    Fault.UNAVAILABLE: (503, "model_unavailable"),  # the model could not start: retrying later may help
}
RETRY_AFTER_S = {Fault.RESTARTED: RESTART_RETRY_AFTER_S, Fault.UNAVAILABLE: UNAVAILABLE_RETRY_AFTER_S}


def job_failure(failed: Failed, param: str | None) -> ApiError:
    """The answer to a job that ended in ``failed``: a 4xx naming ``param`` (the API's own name for the
    event's ``field``) only when the request was at fault; a 5xx ``server_error`` otherwise, with
    ``Retry-After`` where the same request is expected to work later."""
    status, code = FAULT_ANSWERS.get(failed.fault, FAULT_ANSWERS[Fault.ENGINE])
    retry = RETRY_AFTER_S.get(failed.fault)
    headers = {"Retry-After": str(retry)} if retry else None
    if failed.fault == Fault.INPUT:
        return ApiError(status, f"the model refused this request: {failed.message}", code=code, param=param)
    return ApiError(status, failed.message, code=code, headers=headers)


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

    @app.exception_handler(CosyVoiceError)
    async def expected(request: Request, error: CosyVoiceError):
        """Ours, raised on purpose with a message for the user: one log line, no traceback."""
        answer = expected_error(error)
        LOG.warning("%s %s: %s (%s)", request.method, request.url.path, answer.message, answer.code)
        if not request.url.path.startswith(prefix):
            return PlainTextResponse(answer.message, status_code=answer.status)
        return answer.response()

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception):
        inner = error.__cause__ or error.__context__
        if isinstance(inner, StarletteHTTPException):
            # An HTTP answer raised inside a stream already under way (Gradio's message stream of a session it
            # no longer holds, after its tab left): the client is gone, so one line, no traceback.
            LOG.warning("%s %s ended inside its stream: %s", request.method, request.url.path, inner)
            return PlainTextResponse("stream ended", status_code=404)
        LOG.exception("unexpected error answering %s %s", request.method, request.url.path)
        if not request.url.path.startswith(prefix):
            return PlainTextResponse("Internal Server Error", status_code=500)
        return ApiError(
            500,
            f"the server failed on this request ({type(error).__name__}); the server log has the details",
            code="internal_error",
        ).response()


def expected_error(error: CosyVoiceError) -> ApiError:
    """One of our own errors that no route turned into an answer: the request's fault (400 naming its field)
    for an InputError, else the server's (500; its message is written for the user all the same)."""
    if isinstance(error, InputError):
        return bad_request(str(error), getattr(error, "code", "invalid_input"), error.field)
    return ApiError(500, str(error), code="server_failed")


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
