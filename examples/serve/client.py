"""A tiny client of the served envs: lease a session, play it over HTTP, then over a WebSocket.

    python examples/serve/server.py --port 8000 &
    python examples/serve/client.py --url http://127.0.0.1:8000 --env-id CartPole-v1

It sends only JSON (an env id, a seed, actions as lists) and reads only JSON: the server holds
the environments and never runs anything the client sends.
"""

from __future__ import annotations

import argparse
import json
import random

import anyio
import httpx
from websockets.asyncio.client import connect


async def play_over_http(client: httpx.AsyncClient, env_id: str, num_envs: int,
                         steps: int, rng: random.Random) -> float:
    session = (await client.post("/sessions", json={"env_id": env_id,
                                                    "num_envs": num_envs})).json()
    session_id = session["session_id"]
    try:
        await client.post(f"/sessions/{session_id}/reset", json={"seed": 0})
        total = 0.0
        for _ in range(steps):
            actions = [rng.randrange(2) for _ in range(num_envs)]
            response = await client.post(f"/sessions/{session_id}/step",
                                         json={"actions": actions})
            response.raise_for_status()
            total += sum(response.json()["rewards"])
        return total
    finally:
        await client.delete(f"/sessions/{session_id}")


async def play_over_websocket(client: httpx.AsyncClient, url: str, env_id: str,
                              num_envs: int, steps: int, rng: random.Random) -> float:
    session = (await client.post("/sessions", json={"env_id": env_id,
                                                    "num_envs": num_envs})).json()
    address = url.replace("http", "ws", 1) + f"/sessions/{session['session_id']}/ws"
    total = 0.0
    async with connect(address) as socket:  # the connection is the lease
        await socket.send(json.dumps({"op": "reset", "seed": 1}))
        json.loads(await socket.recv())
        for _ in range(steps):
            actions = [rng.randrange(2) for _ in range(num_envs)]
            await socket.send(json.dumps({"op": "step", "actions": actions}))
            answer = json.loads(await socket.recv())
            if not answer["ok"]:
                raise RuntimeError(f"the server refused a step: {answer}")
            total += sum(answer["rewards"])
        await socket.send(json.dumps({"op": "close"}))
    return total


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--env-id", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=4)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    rng = random.Random(0)
    async with httpx.AsyncClient(base_url=args.url, timeout=60) as client:
        print("server:", (await client.get("/healthz")).json())
        http_reward = await play_over_http(client, args.env_id, args.num_envs, args.steps, rng)
        print(f"http: {args.steps} steps of {args.num_envs} {args.env_id} envs, "
              f"total reward {http_reward:.0f}")
        ws_reward = await play_over_websocket(client, args.url, args.env_id, args.num_envs,
                                              args.steps, rng)
        print(f"websocket: {args.steps} steps of {args.num_envs} {args.env_id} envs, "
              f"total reward {ws_reward:.0f}")


if __name__ == "__main__":
    anyio.run(main)
