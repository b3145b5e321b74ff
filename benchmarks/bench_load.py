"""Load generation for the HTTP benchmarks: Debian's wrk with load.lua, or a Python fallback.

Both generators send the same requests (the ``kind`` of a :class:`Workload`):

- ``bare``      GET /json on the bare Starlette app;
- ``echo``      POST /echo with a Bearer key, an Idempotency-Key and a payout-shaped JSON body;
- ``disburse``  POST /v1/disburse, 100 XAF to 670000100, a unique Idempotency-Key (also merchantReference);
- ``charge``    POST /v1/collect/charge, 100 XAF from a fresh MTN CM number (67xxxxxxx) each time;
- ``getref``    GET /v1/collect/{reference}, cycling through the references in ``refs_file``;
- ``getpayout`` GET /v1/disburse/{reference}, cycling through the payout references in ``refs_file``;
- ``replay``    POST /v1/disburse again with a key and body that were already used (idempotent replay).

Run as a script this module is the Python load generator: one closed-loop asyncio client per
connection, keep-alive HTTP/1.1, a duration or an exact request count; it prints one JSON line.

:func:`run_split` loads several ports at once (several API processes on one database, with nothing in
front): the connections are split between one generator per port, all running at the same time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
LUA_SCRIPT = HERE / "load.lua"
PAYOUT_PHONE = "670000100"
PAYOUT_AMOUNT = 100  # XAF, the currency's minimum
FAILING_TAILS = (11, 12, 13)  # the sandbox fails collections to numbers ending in these
RESULT_MARK = "BENCH_RESULT "

KINDS = ("bare", "echo", "disburse", "charge", "getref", "getpayout", "replay")


@dataclass(frozen=True)
class Workload:
    kind: str
    token: str = "-"
    prefix: str = "k"
    phone_base: int = 0
    refs_file: str = "-"
    phone_stride: int = 1  # the n-th charge uses phone index phone_base + (n - 1) * phone_stride

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown workload kind {self.kind!r}")
        if self.phone_stride < 1:
            raise ValueError("phone_stride must be at least 1")


@dataclass
class LoadResult:
    """One load run, whichever generator ran it. Latencies in milliseconds."""

    tool: str
    concurrency: int
    requests: int  # responses received
    duration_s: float
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    mean_ms: float
    non_2xx: int
    socket_errors: int
    generated: int  # requests built (wrk may abandon a few in flight when the time is up)
    statuses: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def payout_body(key: str) -> bytes:
    fields = f'"amount":{PAYOUT_AMOUNT},"currency":"XAF","phone":"{PAYOUT_PHONE}","merchantReference":"{key}"'
    return ("{" + fields + "}").encode()


def charge_body(key: str, phone: str) -> bytes:
    fields = (
        f'"amount":{PAYOUT_AMOUNT},"currency":"XAF","country":"CM","provider":"mtn_cm","phone":"{phone}",'
        f'"merchantReference":"{key}"'
    )
    return ("{" + fields + "}").encode()


def phone_number(index: int) -> str:
    """A valid MTN Cameroon number (9 digits starting 67) for a phone index."""
    return f"67{index % 10_000_000:07d}"


def read_refs(path: str) -> list[str]:
    if path == "-":
        return []
    return [line.strip() for line in Path(path).read_text().splitlines() if line.strip()]


class RequestMaker:
    """Builds the n-th request of a workload as raw HTTP/1.1 bytes (what load.lua sends)."""

    def __init__(self, workload: Workload, host: str, port: int) -> None:
        self.workload = workload
        self.host = f"{host}:{port}"
        self.refs = read_refs(workload.refs_file)
        if workload.kind in ("getref", "getpayout", "replay") and not self.refs:
            raise ValueError(f"workload {workload.kind} needs a refs file")
        self.counter = 0

    def _phone_index(self) -> int:
        while True:
            self.counter += 1
            index = self.workload.phone_base + (self.counter - 1) * self.workload.phone_stride
            if index % 100 not in FAILING_TAILS:
                return index

    def _post(self, path: str, key: str, body: bytes) -> bytes:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\nAuthorization: Bearer {self.workload.token}\r\n"
            f"Content-Type: application/json\r\nIdempotency-Key: {key}\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        return head.encode() + body

    def next(self) -> bytes:
        kind = self.workload.kind
        if kind == "bare":
            self.counter += 1
            return f"GET /json HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode()
        if kind in ("getref", "getpayout"):
            self.counter += 1
            ref = self.refs[self.counter % len(self.refs)]
            path = "/v1/collect/" if kind == "getref" else "/v1/disburse/"
            return (
                f"GET {path}{ref} HTTP/1.1\r\nHost: {self.host}\r\n"
                f"Authorization: Bearer {self.workload.token}\r\n\r\n"
            ).encode()
        if kind == "replay":
            self.counter += 1
            key = self.refs[self.counter % len(self.refs)]
            return self._post("/v1/disburse", key, payout_body(key))
        if kind == "charge":
            index = self._phone_index()
            key = f"{self.workload.prefix}-0-{self.counter}"
            return self._post("/v1/collect/charge", key, charge_body(key, phone_number(index)))
        self.counter += 1
        key = f"{self.workload.prefix}-0-{self.counter}"
        return self._post("/echo" if kind == "echo" else "/v1/disburse", key, payout_body(key))


def percentile(sorted_values: list[float], q: float) -> float:
    """The q-th percentile (0-100) by the nearest-rank method; 0.0 for no values."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


# --- the Python load generator ----------------------------------------------------------------


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
            break
    if length:
        await reader.readexactly(length)
    return status


async def generate(
    host: str, port: int, workload: Workload, concurrency: int, duration: float, limit: int
) -> LoadResult:
    """Closed loop: ``concurrency`` connections, each sending its next request on each response.

    Stops after ``duration`` seconds, or once ``limit`` requests were sent (when ``limit`` > 0) and
    answered.
    """
    maker = RequestMaker(workload, host, port)
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    errors = 0
    sent = 0
    started = time.perf_counter()
    deadline = started + duration if limit <= 0 else math.inf

    async def connection() -> None:
        nonlocal errors, sent
        reader, writer = await asyncio.open_connection(host, port)
        try:
            while time.perf_counter() < deadline and (limit <= 0 or sent < limit):
                sent += 1
                request = maker.next()
                begin = time.perf_counter()
                writer.write(request)
                try:
                    status = await _read_response(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    errors += 1
                    writer.close()
                    reader, writer = await asyncio.open_connection(host, port)
                    continue
                latencies.append(time.perf_counter() - begin)
                statuses[str(status)] = statuses.get(str(status), 0) + 1
        finally:
            writer.close()

    await asyncio.gather(*(connection() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()
    non_2xx = sum(count for status, count in statuses.items() if not status.startswith("2"))
    ms = [value * 1000 for value in latencies]
    return LoadResult(
        tool="python",
        concurrency=concurrency,
        requests=len(latencies),
        duration_s=elapsed,
        rps=len(latencies) / elapsed if elapsed > 0 else 0.0,
        p50_ms=percentile(ms, 50),
        p90_ms=percentile(ms, 90),
        p99_ms=percentile(ms, 99),
        max_ms=ms[-1] if ms else 0.0,
        mean_ms=sum(ms) / len(ms) if ms else 0.0,
        non_2xx=non_2xx,
        socket_errors=errors,
        generated=maker.counter,
        statuses=statuses,
    )


# --- drivers used by run.py -------------------------------------------------------------------


def have_wrk() -> bool:
    return shutil.which("wrk") is not None


def run_python(
    host: str, port: int, workload: Workload, concurrency: int, duration: float, limit: int = 0
) -> LoadResult:
    """The Python generator in its own process (an external client, like wrk)."""
    command = [
        sys.executable,
        str(HERE / "bench_load.py"),
        "--host",
        host,
        "--port",
        str(port),
        "--kind",
        workload.kind,
        "--token",
        workload.token,
        "--prefix",
        workload.prefix,
        "--phone-base",
        str(workload.phone_base),
        "--refs-file",
        workload.refs_file,
        "--phone-stride",
        str(workload.phone_stride),
        "--concurrency",
        str(concurrency),
        "--duration",
        str(duration),
        "--limit",
        str(limit),
    ]
    timeout = 600.0 if limit > 0 else duration + 60
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"python load generator failed: {done.stderr.strip()[-2000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith(RESULT_MARK))
    return LoadResult(**json.loads(line[len(RESULT_MARK) :]))


def run_wrk(host: str, port: int, workload: Workload, concurrency: int, duration: float) -> LoadResult:
    """One wrk run (one thread: the server gets the other core). wrk takes whole seconds."""
    seconds = max(1, round(duration))
    command = [
        "wrk",
        "-t1",
        f"-c{concurrency}",
        f"-d{seconds}s",
        "--timeout",
        "30s",
        "-s",
        str(LUA_SCRIPT),
        f"http://{host}:{port}",
        "--",
        workload.kind,
        workload.token,
        workload.prefix,
        str(workload.phone_base),
        str(workload.phone_stride),  # load.lua's stride between one thread's phone indexes (-t1)
        workload.refs_file,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=seconds + 60, check=False)
    lines = [x for x in done.stdout.splitlines() if x.startswith(RESULT_MARK)]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    raw = json.loads(lines[-1][len(RESULT_MARK) :])
    duration_s = raw["duration_us"] / 1e6
    socket_errors = raw["connect_errors"] + raw["read_errors"] + raw["write_errors"] + raw["timeouts"]
    return LoadResult(
        tool="wrk",
        concurrency=concurrency,
        requests=raw["requests"],
        duration_s=duration_s,
        rps=raw["requests"] / duration_s if duration_s > 0 else 0.0,
        p50_ms=raw["p50_us"] / 1000,
        p90_ms=raw["p90_us"] / 1000,
        p99_ms=raw["p99_us"] / 1000,
        max_ms=raw["max_us"] / 1000,
        mean_ms=raw["mean_us"] / 1000,
        non_2xx=raw["status_errors"],
        socket_errors=socket_errors,
        generated=raw["generated"],
        statuses={},
    )


def run_load(
    tool: str, host: str, port: int, workload: Workload, concurrency: int, duration: float
) -> LoadResult:
    if tool == "wrk":
        return run_wrk(host, port, workload, concurrency, duration)
    return run_python(host, port, workload, concurrency, duration)


def split_connections(concurrency: int, parts: int) -> list[int]:
    """``concurrency`` connections over ``parts`` generators, as evenly as whole numbers go."""
    if not 1 <= parts <= concurrency:
        raise ValueError(f"cannot split {concurrency} connections over {parts} generators")
    return [concurrency // parts + (1 if i < concurrency % parts else 0) for i in range(parts)]


def merge_results(parts: list[LoadResult]) -> LoadResult:
    """One result for generators that ran at the same time: requests and rates add up; a latency
    percentile is the worst of the parts' (each part's is exact, the merge is conservative)."""
    requests = sum(p.requests for p in parts)
    statuses: dict[str, int] = {}
    for part in parts:
        for status, count in part.statuses.items():
            statuses[status] = statuses.get(status, 0) + count
    return LoadResult(
        tool=parts[0].tool,
        concurrency=sum(p.concurrency for p in parts),
        requests=requests,
        duration_s=max(p.duration_s for p in parts),
        rps=sum(p.rps for p in parts),
        p50_ms=max(p.p50_ms for p in parts),
        p90_ms=max(p.p90_ms for p in parts),
        p99_ms=max(p.p99_ms for p in parts),
        max_ms=max(p.max_ms for p in parts),
        mean_ms=sum(p.mean_ms * p.requests for p in parts) / requests if requests else 0.0,
        non_2xx=sum(p.non_2xx for p in parts),
        socket_errors=sum(p.socket_errors for p in parts),
        generated=sum(p.generated for p in parts),
        statuses=statuses,
    )


def run_split(
    tool: str, host: str, ports: list[int], workloads: list[Workload], concurrency: int, duration: float
) -> tuple[LoadResult, list[LoadResult]]:
    """Load ``ports[i]`` with ``workloads[i]`` (one generator each, all at once), the connections split
    evenly; the merged result and each part's. A port may appear twice: the same split load on one
    process, the fair baseline for the same load spread over two."""
    if len(ports) != len(workloads):
        raise ValueError("one workload per port")
    shares = split_connections(concurrency, len(ports))
    with ThreadPoolExecutor(max_workers=len(ports)) as pool:
        futures = [
            pool.submit(run_load, tool, host, port, workload, share, duration)
            for port, workload, share in zip(ports, workloads, shares, strict=True)
        ]
        parts = [future.result() for future in futures]
    return merge_results(parts), parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the Python fallback load generator")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--token", default="-")
    parser.add_argument("--prefix", default="k")
    parser.add_argument("--phone-base", type=int, default=0)
    parser.add_argument("--refs-file", default="-")
    parser.add_argument("--phone-stride", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--limit", type=int, default=0, help="send exactly this many requests, then stop")
    args = parser.parse_args(argv)
    if not args.host.startswith("127.") and args.host not in ("localhost", "::1"):
        parser.error("this generator only loads loopback addresses")
    workload = Workload(
        args.kind, args.token, args.prefix, args.phone_base, args.refs_file, args.phone_stride
    )
    result = asyncio.run(
        generate(args.host, args.port, workload, args.concurrency, args.duration, args.limit)
    )
    print(RESULT_MARK + json.dumps(result.to_json()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
