"""The load-test contract served the FastAPI way: a reference for ``airlane bench --compare``.

SSE through sse-starlette's ``EventSourceResponse`` over an async generator, WebSocket through
FastAPI's ``WebSocket``, on uvicorn with what ``uvicorn[standard]`` brings (uvloop, httptools,
websockets). Nothing is tuned beyond what a FastAPI user would write.

    python benchmarks/peers/fastapi_app.py --port 0     # prints: listening on http://...
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import uvicorn
from fastapi import FastAPI, HTTPException, Request, WebSocket, WebSocketDisconnect, status
from loadtest import LoadTestQuery, announce, chunk_stream, listening_socket, parse_args
from sse_starlette import EventSourceResponse

app = FastAPI(title="load-test peer (FastAPI)")


@app.get("/healthz")
async def healthz() -> dict[str, int]:
    """Liveness, and this process's id (the benchmark samples its CPU use)."""
    return {"pid": os.getpid()}


def _query(params: dict[str, str]) -> LoadTestQuery:
    try:
        return LoadTestQuery.parse(params)
    except ValueError as exc:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None


@app.get("/v1/loadtest/sse")
async def loadtest_sse(request: Request) -> EventSourceResponse:
    """One load-test stream as Server-Sent Events: each event's data is one chunk."""
    query = _query(dict(request.query_params))

    async def events() -> AsyncIterator[dict[str, str]]:
        async for chunk in chunk_stream(query):
            yield {"data": chunk}

    # sse-starlette ends lines with CRLF unless told otherwise; the contract (and Airlane)
    # uses LF.
    return EventSourceResponse(events(), sep="\n")


@app.websocket("/v1/loadtest/ws")
async def loadtest_ws(websocket: WebSocket) -> None:
    """One load-test stream over WebSocket: each text message is one chunk; close 1000."""
    try:
        query = LoadTestQuery.parse(dict(websocket.query_params))
    except ValueError as exc:
        await websocket.close(code=status.WS_1008_POLICY_VIOLATION, reason=str(exc))
        return
    await websocket.accept()
    try:
        async for chunk in chunk_stream(query):
            await websocket.send_text(chunk)
    except WebSocketDisconnect:
        return
    await websocket.close(code=status.WS_1000_NORMAL_CLOSURE)


def main() -> None:
    """Serve on ``--host``/``--port`` until interrupted."""
    args = parse_args("The load-test contract on FastAPI + uvicorn.")
    sock = listening_socket(args.host, args.port)
    # Warnings only, as the Airlane gateway is run in the benchmark: no access log.
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    announce(sock)
    server.run(sockets=[sock])


if __name__ == "__main__":
    main()
