"""The OpenAPI 3.1 description of the HTTP routes (the WebSocket protocol is described in
the docs: OpenAPI has no words for it)."""

from __future__ import annotations

from typing import Any

__all__ = ["openapi_document"]


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


_ERROR = {"$ref": "#/components/schemas/Error"}
_SESSION = {"$ref": "#/components/schemas/Session"}
_RESULT = {"$ref": "#/components/schemas/Result"}
_SESSION_ID = [{"name": "session_id", "in": "path", "required": True,
                "schema": {"type": "string"}}]


def _answers(ok: int, ok_schema: dict[str, Any] | None, *errors: int) -> dict[str, Any]:
    answers: dict[str, Any] = {str(ok): {"description": "done",
                                         **(_json(ok_schema) if ok_schema else {})}}
    for status in errors:
        answers[str(status)] = {"description": "refused", **_json(_ERROR)}
    return answers


def openapi_document(env_ids: list[str], codes: list[str]) -> dict[str, Any]:
    """The document for a server of ``env_ids`` whose errors use ``codes``."""
    operate = {"requestBody": _json({"type": "object"}), "parameters": _SESSION_ID,
               "responses": _answers(200, _RESULT, 400, 401, 404, 409, 413, 415, 422, 502,
                                     504)}
    return {
        "openapi": "3.1.0",
        "info": {"title": "aiovec.serve", "version": "1",
                 "description": "Sessions of allow-listed Gymnasium environments."},
        "paths": {
            "/healthz": {"get": {"summary": "Liveness and the number of open sessions",
                                 "responses": _answers(200, {"type": "object"}, 503)}},
            "/metrics": {"get": {"summary": "Prometheus metrics (text format 0.0.4)",
                                 "responses": {"200": {"description": "metrics"}}}},
            "/envs": {"get": {"summary": "The env ids served here",
                              "responses": _answers(200, {"type": "object"}, 401)}},
            "/sessions": {"post": {
                "summary": "Open a session of num_envs sub-envs of env_id",
                "requestBody": _json({"type": "object", "required": ["env_id"], "properties": {
                    "env_id": {"type": "string", "enum": env_ids},
                    "num_envs": {"type": "integer", "minimum": 1, "default": 1}}}),
                "responses": _answers(201, _SESSION, 400, 401, 413, 415, 422, 429, 503)}},
            "/sessions/{session_id}": {
                "get": {"summary": "The session", "parameters": _SESSION_ID,
                        "responses": _answers(200, _SESSION, 401, 404)},
                "delete": {"summary": "Close the session", "parameters": _SESSION_ID,
                           "responses": {"204": {"description": "closed"},
                                         **_answers(204, None, 401, 404)}}},
            "/sessions/{session_id}/reset": {"post": {
                "summary": "Reset: {seed: int | [int|null] | null, options: object | null, "
                           "timeout: seconds | null}",
                **operate}},
            "/sessions/{session_id}/step": {"post": {
                "summary": "Step every sub-env: {actions: one per sub-env, timeout: seconds | "
                           "null}", **operate}},
            "/sessions/{session_id}/send": {"post": {
                "summary": "Start stepping: {actions, env_ids: [int] | null, timeout: seconds | "
                           "null}", **operate}},
            "/sessions/{session_id}/recv": {"post": {
                "summary": "The first-ready results: {batch_size: int | null, min_size: int | "
                           "null, wait: seconds | null}", **operate}},
            "/sessions/{session_id}/abort": {"post": {
                "summary": "Cancel sub-envs' outstanding steps (they need a reset after): "
                           "{env_ids: [int] | null}", **operate}},
            "/sessions/{session_id}/max_in_flight": {"post": {
                "summary": "Move the in-flight cap: {max_in_flight: int | null}",
                **operate}},
        },
        "components": {"schemas": {
            "Error": {"type": "object", "required": ["error", "detail"], "properties": {
                "error": {"type": "string", "enum": codes}, "detail": {"type": "string"}}},
            "Session": {"type": "object", "properties": {
                "session_id": {"type": "string"}, "env_id": {"type": "string"},
                "num_envs": {"type": "integer"},
                "batch_size": {"type": "integer"},
                "max_in_flight": {"type": ["integer", "null"]},
                "single_observation_space": {"type": "object"},
                "single_action_space": {"type": "object"}}},
            "Result": {"type": "object", "properties": {
                "observations": {}, "rewards": {"type": "array"},
                "terminations": {"type": "array"}, "truncations": {"type": "array"},
                "infos": {"type": "object"}, "env_ids": {"type": "array"}}},
        }},
    }
