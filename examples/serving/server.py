#!/usr/bin/env python3
"""server.py - a small OpenAI-compatible model server: gpuorch's stand-in for
vLLM, as the fake NVML stands in for a GPU. Python 3's standard library only.

    python3 server.py [--host H] [--port N] [--model NAME] [--load-s S]
                      [--prefill-tps N] [--decode-tps N] [--max-batch N]
                      [--max-tokens N] [--batch-slowdown F]

Endpoints: GET /health (503 while the "model loads", then 200), GET
/v1/models, POST /v1/completions and /v1/chat/completions (OpenAI's JSON;
"stream": true answers with server-sent events), GET /metrics (Prometheus
text with vLLM's gauge names). No GPU is touched and no model is loaded: the
answers are deterministic filler words, timed by the model README.md
describes (prefill, then one token per engine step for every running
request, at most --max-batch running; the rest wait).

It prints one line "listening on HOST:PORT" (the port it bound: --port 0
picks a free one) and one line "ready" once loaded, both to stdout."""

import argparse
import collections
import json
import os
import signal
import sys
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.dont_write_bytecode = True

MAX_BODY = 16 << 20  # bytes of a request body
WORDS = ("the", "model", "answers", "with", "filler", "words", "so", "that",
         "every", "token", "is", "one", "word", "and", "timing", "follows",
         "a", "simple", "documented", "rule", "of", "prefill", "decode",
         "steps", "batch", "served", "by", "gpuorch", "example", "replica")


class RequestError(Exception):
    """An OpenAI-style error answer: status, message, type, param."""

    def __init__(self, status, message, kind="invalid_request_error", param=None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param = status, message, kind, param


def env_default(name, fallback, conv=str):
    value = os.environ.get(name)
    if value is None or value == "":
        return fallback
    try:
        return conv(value)
    except ValueError:
        sys.exit(f"server.py: ${name}: not a valid value: {value!r}")


def positive(conv):
    def check(text):
        value = conv(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be more than 0: {text}")
        return value
    return check


def non_negative(conv):
    def check(text):
        value = conv(text)
        if value < 0:
            raise argparse.ArgumentTypeError(f"must not be negative: {text}")
        return value
    return check


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="server.py",
        description="An OpenAI-compatible stand-in model server (see README.md).")
    p.add_argument("--host", default=env_default("HOST", "0.0.0.0"),
                   help="address to listen on (default $HOST or 0.0.0.0)")
    p.add_argument("--port", type=non_negative(int), default=env_default("PORT", 8000, int),
                   help="port (default $PORT, else 8000; 0 picks a free one)")
    p.add_argument("--model", default=env_default("GPUORCH_SERVICE", "example"),
                   help="the served model's name (default $GPUORCH_SERVICE or 'example')")
    p.add_argument("--load-s", type=non_negative(float),
                   default=env_default("MODEL_LOAD_S", 0.0, float),
                   help="seconds before /health answers 200 (default $MODEL_LOAD_S or 0)")
    p.add_argument("--prefill-tps", type=positive(float),
                   default=env_default("MODEL_PREFILL_TPS", 5000.0, float),
                   help="prompt tokens per second of prefill (default $MODEL_PREFILL_TPS or 5000)")
    p.add_argument("--decode-tps", type=positive(float),
                   default=env_default("MODEL_DECODE_TPS", 50.0, float),
                   help="engine steps per second, one token per running request each "
                        "(default $MODEL_DECODE_TPS or 50)")
    p.add_argument("--max-batch", type=positive(int),
                   default=env_default("MODEL_MAX_BATCH", 16, int),
                   help="requests running at once; more wait (default $MODEL_MAX_BATCH or 16)")
    p.add_argument("--max-tokens", type=positive(int),
                   default=env_default("MODEL_MAX_TOKENS", 16, int),
                   help="output tokens when a request gives no max_tokens "
                        "(default $MODEL_MAX_TOKENS or 16)")
    p.add_argument("--batch-slowdown", type=non_negative(float),
                   default=env_default("MODEL_BATCH_SLOWDOWN", 0.0, float),
                   help="a step with B decoding requests takes (1 + F*(B-1))/decode_tps "
                        "(default $MODEL_BATCH_SLOWDOWN or 0: batching is free)")
    return p.parse_args(argv)


class Request:
    """One generation: its token budget and the queue its tokens go to."""

    def __init__(self, prompt_tokens, max_tokens, seed):
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.seed = seed
        self.produced = 0
        self.decode_at = None  # monotonic time its prefill ends, once admitted
        self.cancelled = False
        self.tokens = collections.deque()
        self.done = False
        self.cond = threading.Condition()

    def word(self, i):
        return WORDS[(self.seed + i * 7) % len(WORDS)]

    def push(self, word, last):
        with self.cond:
            self.tokens.append(word)
            self.done = last
            self.cond.notify()

    def next_tokens(self):
        """Blocks for the tokens made since the last call: (words, done)."""
        with self.cond:
            while not self.tokens and not self.done:
                self.cond.wait()
            words = list(self.tokens)
            self.tokens.clear()
            return words, self.done


class Engine:
    """Continuous batching: admits waiting requests while fewer than max_batch
    run; a running request first prefills (prompt_tokens / prefill_tps s), then
    gets one token per engine step. A step with B decoding requests takes
    (1 + slowdown * (B - 1)) / decode_tps seconds."""

    def __init__(self, args):
        self.args = args
        self.lock = threading.Condition()
        self.waiting = collections.deque()
        self.running = []
        self.counts = collections.Counter()  # metric name -> value
        threading.Thread(target=self.loop, name="engine", daemon=True).start()

    def submit(self, req):
        with self.lock:
            self.waiting.append(req)
            self.counts["prompt_tokens"] += req.prompt_tokens
            self.lock.notify()

    def cancel(self, req):
        with self.lock:
            req.cancelled = True
            if req in self.waiting:
                self.waiting.remove(req)
                self.counts["aborted"] += 1
            self.lock.notify()

    def gauges(self):
        with self.lock:
            return len(self.running), len(self.waiting), dict(self.counts)

    def _admit(self, now):
        while self.waiting and len(self.running) < self.args.max_batch:
            req = self.waiting.popleft()
            req.decode_at = now + req.prompt_tokens / self.args.prefill_tps
            self.running.append(req)

    def _drop_cancelled(self):
        kept = [r for r in self.running if not r.cancelled]
        self.counts["aborted"] += len(self.running) - len(kept)
        self.running = kept

    def _next_batch(self):
        """Waits until a request can decode; returns the decoding ones."""
        with self.lock:
            while True:
                self._drop_cancelled()
                now = time.monotonic()
                self._admit(now)
                batch = [r for r in self.running if r.decode_at <= now]
                if batch:
                    return batch
                if self.running:
                    self.lock.wait(min(r.decode_at for r in self.running) - now)
                else:
                    self.lock.wait()

    def loop(self):
        step_end = time.monotonic()
        while True:
            batch = self._next_batch()
            step = (1 + self.args.batch_slowdown * (len(batch) - 1)) / self.args.decode_tps
            # Steps follow each other without drift; after an idle time
            # the next one starts now.
            step_end = max(step_end, time.monotonic()) + step
            delay = step_end - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with self.lock:
                for req in batch:
                    if req.cancelled:
                        continue
                    last = req.produced + 1 >= req.max_tokens
                    req.push(req.word(req.produced), last)
                    req.produced += 1
                    self.counts["generation_tokens"] += 1
                    if last:
                        self.running.remove(req)
                        self.counts["success"] += 1


class Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the listen backlog: bursts of new connections

    def __init__(self, args):
        self.args = args
        self.started = time.monotonic()
        self.loaded = threading.Event()
        self.engine = Engine(args)
        self.http_counts = collections.Counter()  # (path, code) -> requests
        self.http_lock = threading.Lock()
        super().__init__((args.host, args.port), Handler)

    def count(self, path, code):
        with self.http_lock:
            self.http_counts[(path, code)] += 1


def words_of(text):
    return len(text.split()) if isinstance(text, str) else 0


def prompt_of_chat(body):
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "'messages' must be a non-empty list", param="messages")
    parts = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise RequestError(400, f"messages[{i}] must be an object with a 'role'",
                               param="messages")
        content = m.get("content")
        if isinstance(content, list):  # the content-parts form
            content = " ".join(p.get("text", "") for p in content
                               if isinstance(p, dict) and isinstance(p.get("text"), str))
        parts.append(content if isinstance(content, str) else "")
    return " ".join(parts)


def prompt_of_completion(body):
    prompt = body.get("prompt")
    if isinstance(prompt, list):
        if not all(isinstance(p, (str, int)) for p in prompt):
            raise RequestError(400, "'prompt' must be a string or a list", param="prompt")
        # A list of token ids counts one token each; a list of strings, their words.
        return " ".join(str(p) for p in prompt)
    if not isinstance(prompt, str):
        raise RequestError(400, "'prompt' must be a string or a list", param="prompt")
    return prompt


def int_field(body, name, default):
    value = body.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError(400, f"'{name}' must be a positive integer", param=name)
    return value


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gpuorch-example/1"

    def log_message(self, fmt, *args):  # one line per request is too much at 1,000/s
        pass

    # ---- plumbing ---------------------------------------------------------

    def send(self, code, body, ctype="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.server.count(self.path.split("?")[0], code)

    def send_error_json(self, err):
        self.send(err.status, {"error": {"message": err.message, "type": err.kind,
                                         "param": err.param, "code": None}})

    def read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self.read_chunked()
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            self.close_connection = True
            raise RequestError(400, "malformed Content-Length")
        if length < 0 or length > MAX_BODY:
            self.close_connection = True
            raise RequestError(413 if length > 0 else 400, "body too large or malformed")
        return self.rfile.read(length)

    def read_chunked(self):
        data = bytearray()
        while True:
            line = self.rfile.readline(1024).strip()
            try:
                size = int(line.split(b";")[0], 16)
            except ValueError:
                self.close_connection = True
                raise RequestError(400, "malformed chunk size")
            if size == 0:
                while self.rfile.readline(1024).strip():
                    pass  # trailers
                return bytes(data)
            if len(data) + size > MAX_BODY:
                self.close_connection = True
                raise RequestError(413, "body too large")
            data += self.rfile.read(size)
            self.rfile.readline(8)

    def json_body(self):
        raw = self.read_body()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise RequestError(400, f"the body is not valid JSON: {e}")
        if not isinstance(body, dict):
            raise RequestError(400, "the body must be a JSON object")
        return body

    # ---- routes -----------------------------------------------------------

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/health":
            if self.server.loaded.is_set():
                self.send(200, {"status": "ok"})
            else:
                self.send(503, {"status": "loading"})
        elif path == "/v1/models":
            self.send(200, {"object": "list", "data": [{
                "id": self.server.args.model, "object": "model",
                "created": int(time.time()), "owned_by": "gpuorch-example"}]})
        elif path == "/metrics":
            self.send(200, self.metrics().encode(), "text/plain; version=0.0.4")
        else:
            self.send_error_json(RequestError(404, f"no route {path}", "not_found_error"))

    def do_POST(self):
        path = self.path.split("?")[0]
        try:
            if path not in ("/v1/completions", "/v1/chat/completions"):
                self.read_body()
                raise RequestError(404, f"no route {path}", "not_found_error")
            body = self.json_body()
            if not self.server.loaded.is_set():
                raise RequestError(503, "the model is still loading", "server_error")
            self.generate(body, chat=path == "/v1/chat/completions")
        except RequestError as e:
            self.send_error_json(e)

    def generate(self, body, chat):
        prompt = prompt_of_chat(body) if chat else prompt_of_completion(body)
        prompt_tokens = int_field(body, "prompt_tokens", max(words_of(prompt), 1))
        max_tokens = int_field(body, "max_completion_tokens" if chat and
                               "max_completion_tokens" in body else "max_tokens",
                               self.server.args.max_tokens)
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise RequestError(400, "'stream' must be true or false", param="stream")
        opts = body.get("stream_options") or {}
        usage_chunk = isinstance(opts, dict) and opts.get("include_usage") is True
        req = Request(prompt_tokens, max_tokens, zlib.crc32(prompt.encode()))
        meta = {"id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
                "created": int(time.time()), "model": self.server.args.model}
        self.server.engine.submit(req)
        try:
            if stream:
                self.stream(req, meta, chat, usage_chunk)
            else:
                self.answer(req, meta, chat)
        finally:
            if not req.done:
                self.server.engine.cancel(req)

    def usage(self, req):
        return {"prompt_tokens": req.prompt_tokens, "completion_tokens": req.max_tokens,
                "total_tokens": req.prompt_tokens + req.max_tokens}

    def answer(self, req, meta, chat):
        words = []
        done = False
        while not done:
            more, done = req.next_tokens()
            words += more
        text = " ".join(words)
        if chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text},
                      "logprobs": None, "finish_reason": "length"}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length"}
        self.send(200, dict(meta, object="chat.completion" if chat else "text_completion",
                            choices=[choice], usage=self.usage(req)))

    def chunk(self, payload):
        data = b"data: " + payload + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def stream(self, req, meta, chat, usage_chunk):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        obj = "chat.completion.chunk" if chat else "text_completion"

        def event(choice, **extra):
            body = dict(meta, object=obj, choices=[choice] if choice else [], **extra)
            self.chunk(json.dumps(body).encode())

        try:
            if chat:
                event({"index": 0, "delta": {"role": "assistant", "content": ""},
                       "logprobs": None, "finish_reason": None})
            first, done = True, False
            while not done:
                words, done = req.next_tokens()
                for w in words:
                    text = w if first else " " + w
                    first = False
                    if chat:
                        event({"index": 0, "delta": {"content": text},
                               "logprobs": None, "finish_reason": None})
                    else:
                        event({"index": 0, "text": text, "logprobs": None,
                               "finish_reason": None})
            if chat:
                event({"index": 0, "delta": {}, "logprobs": None, "finish_reason": "length"})
            else:
                event({"index": 0, "text": "", "logprobs": None, "finish_reason": "length"})
            if usage_chunk:
                event(None, usage=self.usage(req))
            self.chunk(b"[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
            self.server.count(self.path.split("?")[0], 200)
        except OSError:  # the client went away: its request stops running
            self.close_connection = True

    def metrics(self):
        running, waiting, counts = self.server.engine.gauges()
        label = 'model_name="%s"' % self.server.args.model.replace("\\", "\\\\").replace(
            '"', '\\"')
        out = [
            "# HELP vllm:num_requests_running Number of requests in the running batch.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{label}}} {running}",
            "# HELP vllm:num_requests_waiting Number of requests waiting for the batch.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{label}}} {waiting}",
            "# HELP vllm:request_success_total Requests that finished.",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{{label},finished_reason="length"}} '
            f'{counts.get("success", 0)}',
            "# HELP example_request_aborted_total Requests whose client went away.",
            "# TYPE example_request_aborted_total counter",
            f'example_request_aborted_total{{{label}}} {counts.get("aborted", 0)}',
            "# HELP vllm:prompt_tokens_total Prompt tokens prefilled.",
            "# TYPE vllm:prompt_tokens_total counter",
            f'vllm:prompt_tokens_total{{{label}}} {counts.get("prompt_tokens", 0)}',
            "# HELP vllm:generation_tokens_total Tokens generated.",
            "# TYPE vllm:generation_tokens_total counter",
            f'vllm:generation_tokens_total{{{label}}} {counts.get("generation_tokens", 0)}',
            "# HELP example_http_requests_total HTTP requests answered, by path and code.",
            "# TYPE example_http_requests_total counter",
        ]
        with self.server.http_lock:
            rows = sorted(self.server.http_counts.items())
        for (path, code), n in rows:
            path = path.replace("\\", "\\\\").replace('"', '\\"')
            out.append(f'example_http_requests_total{{{label},path="{path}",code="{code}"}} {n}')
        return "\n".join(out) + "\n"


def main(argv):
    args = parse_args(argv)
    try:
        srv = Server(args)
    except OSError as e:
        sys.exit(f"server.py: cannot listen on {args.host}:{args.port}: {e.strerror}")
    host, port = srv.server_address[:2]
    print(f"listening on {host}:{port} (model {args.model}, loading for {args.load_s:g} s)",
          flush=True)

    def loaded():
        srv.loaded.set()
        print("ready", flush=True)

    timer = threading.Timer(args.load_s, loaded)
    timer.daemon = True
    timer.start()
    # SIGTERM ends it at once: the router has drained it before it comes.
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    try:
        srv.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main(sys.argv[1:])
