#!/usr/bin/env python3
"""example_server_test.py SERVER_PY - the example model server
(examples/serving/server.py) over HTTP on loopback. Prints TAP.

What it checks: /health answers 503 while the model "loads" and 200 after
--load-s (polled); a completion before then is 503; /v1/models; the shapes
of completions and chat completions, streamed (SSE over chunked encoding,
`data: [DONE]` last) and not; the same prompt gives the same words; a
streamed answer's first token reaches the client while /metrics still counts
the request running (before the last token is made); an answer of N tokens
at R tokens/s takes at least N/R s; with --max-batch 2 four long requests
show 2 running and 2 waiting, then 0 and 0, and the success counter grew by
four; a client gone mid-stream frees its batch slot; keep-alive; bad JSON and
bad fields get 400 in OpenAI's error shape; unknown routes 404; $PORT,
$GPUORCH_SERVICE and $MODEL_LOAD_S as defaults; a bad flag exits 2 naming it.

The servers are child processes stopped by PID; conditions are polled with
deadlines, and no check depends on a sleep."""

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # leave no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import DEADLINE_S, diag, free_port, ok, wait_until  # noqa: E402

SERVER_PY = os.path.abspath(sys.argv[1])
CHILDREN = []


class Example:
    """One server.py child; its port is read from its first line."""

    def __init__(self, *args, env=None):
        e = dict(os.environ)
        for k in ("PORT", "GPUORCH_SERVICE", "MODEL_LOAD_S"):
            e.pop(k, None)
        e.update(env or {})
        self.proc = subprocess.Popen([sys.executable, SERVER_PY, "--host", "127.0.0.1", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e,
                                     text=True)
        CHILDREN.append(self.proc)
        line = self.proc.stdout.readline()
        m = re.match(r"listening on 127\.0\.0\.1:(\d+)", line)
        if not m:
            raise RuntimeError(f"server.py did not start: {line!r}")
        self.port = int(m.group(1))

    def conn(self, timeout=DEADLINE_S):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def call(self, method, path, body=None, conn=None, raw=None):
        c = conn or self.conn()
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None
                                            else None)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        payload = r.read()
        if not conn:
            c.close()
        try:
            parsed = json.loads(payload)
        except ValueError:
            parsed = None
        return r.status, parsed, payload

    def metrics(self):
        st, _, raw = self.call("GET", "/metrics")
        out = {}
        for line in raw.decode().splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                out[name] = float(value)
        return out

    def gauge(self, name):
        return self.metrics().get(f'vllm:{name}{{model_name="m1"}}', -1)

    def stream(self, path, body):
        """Opens a streamed request; returns (connection, response)."""
        c = self.conn()
        c.request("POST", path, body=json.dumps(dict(body, stream=True)).encode(),
                  headers={"Content-Type": "application/json"})
        return c, c.getresponse()


def events(resp):
    """Yields each SSE event's data (a parsed chunk, or '[DONE]')."""
    while True:
        line = resp.readline()
        if not line:
            return
        line = line.strip()
        if line.startswith(b"data: "):
            data = line[len(b"data: "):]
            yield "[DONE]" if data == b"[DONE]" else json.loads(data)


def check_loading(srv):
    st, body, _ = srv.call("GET", "/health")
    ok(st == 503, "/health answers 503 while the model loads", f"{st} {body}")
    st, body, _ = srv.call("POST", "/v1/completions", {"prompt": "hi"})
    ok(st == 503 and body["error"]["type"] == "server_error",
       "a completion while loading is refused with 503", f"{st} {body}")
    ready = wait_until(lambda: srv.call("GET", "/health")[0] == 200, timeout=DEADLINE_S)
    ok(ready, "/health answers 200 once --load-s has passed")
    st, body, _ = srv.call("GET", "/v1/models")
    ok(st == 200 and body["object"] == "list" and body["data"][0]["id"] == "m1" and
       body["data"][0]["object"] == "model", "/v1/models lists the model", f"{st} {body}")


def check_completion(srv):
    st, body, _ = srv.call("POST", "/v1/completions",
                           {"model": "m1", "prompt": "one two three", "max_tokens": 5})
    ok(st == 200 and body["id"].startswith("cmpl-") and body["object"] == "text_completion" and
       isinstance(body["created"], int) and body["model"] == "m1",
       "a completion has OpenAI's id, object, created and model", f"{st} {body}")
    ch = body["choices"][0]
    ok(ch["index"] == 0 and len(ch["text"].split()) == 5 and ch["finish_reason"] == "length",
       "its one choice holds max_tokens words, finished by length", json.dumps(body))
    ok(body["usage"] == {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8},
       "usage counts the prompt's words and the tokens made", json.dumps(body))
    st2, body2, _ = srv.call("POST", "/v1/completions",
                             {"model": "m1", "prompt": "one two three", "max_tokens": 5})
    ok(body2["choices"][0]["text"] == ch["text"], "the same prompt gives the same words",
       f"{body2} {body}")
    st, body, _ = srv.call("POST", "/v1/completions",
                           {"prompt": "x", "prompt_tokens": 300, "max_tokens": 1})
    ok(st == 200 and body["usage"]["prompt_tokens"] == 300,
       "a prompt_tokens hint sets the prompt's length", f"{st} {body}")
    st, body, _ = srv.call("POST", "/v1/completions", {"prompt": "x"})
    ok(st == 200 and body["usage"]["completion_tokens"] == 3,
       "without max_tokens, --max-tokens tokens are made", f"{st} {body}")
    st, body, _ = srv.call("POST", "/v1/chat/completions", {
        "model": "m1", "max_tokens": 4,
        "messages": [{"role": "system", "content": "be short"},
                     {"role": "user", "content": "hello there"}]})
    ch = body["choices"][0] if st == 200 else {}
    ok(st == 200 and body["id"].startswith("chatcmpl-") and body["object"] == "chat.completion" and
       ch["message"]["role"] == "assistant" and len(ch["message"]["content"].split()) == 4 and
       ch["finish_reason"] == "length" and body["usage"]["prompt_tokens"] == 4,
       "a chat completion has OpenAI's shape: an assistant message, usage", f"{st} {body}")


def check_stream(srv):
    """20 tokens at 10 tokens/s: the first arrives while the request runs."""
    started = time.monotonic()
    c, r = srv.stream("/v1/completions", {"prompt": "stream me", "max_tokens": 20})
    ok(r.status == 200 and r.getheader("Content-Type") == "text/event-stream" and
       r.getheader("Transfer-Encoding") == "chunked",
       "a streamed completion is text/event-stream, chunked",
       f"{r.status} {r.getheaders()}")
    it = events(r)
    first = next(it)
    running = srv.gauge("num_requests_running")
    ok(first["object"] == "text_completion" and first["choices"][0]["finish_reason"] is None and
       first["choices"][0]["text"], "the first SSE chunk holds one token", json.dumps(first))
    ok(running == 1, "the first chunk is read while /metrics still shows the request running",
       f"running {running}")
    rest = list(it)
    elapsed = time.monotonic() - started
    c.close()
    texts = [e["choices"][0]["text"] for e in [first] + rest[:-2]]
    ok(len(texts) == 20 and rest[-1] == "[DONE]" and
       rest[-2]["choices"][0]["finish_reason"] == "length",
       "20 token chunks, a chunk finished by length, then data: [DONE]",
       f"{len(texts)} {rest[-2:]}")
    ok(elapsed >= 20 / 10 - 0.05, "20 tokens at 10 tokens/s take at least 2 s",
       f"{elapsed:.2f} s")
    st, body, _ = srv.call("POST", "/v1/completions",
                           {"prompt": "stream me", "max_tokens": 20})
    ok("".join(texts) == body["choices"][0]["text"],
       "the streamed words are the unstreamed answer's", f"{texts} {body}")

    c, r = srv.stream("/v1/chat/completions",
                      {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
                       "stream_options": {"include_usage": True}})
    evs = list(events(r))
    c.close()
    ok(evs[0]["object"] == "chat.completion.chunk" and
       evs[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""},
       "a streamed chat opens with the assistant's role", json.dumps(evs[:1]))
    deltas = [e["choices"][0]["delta"].get("content") for e in evs[1:4]]
    ok(len(deltas) == 3 and all(deltas) and evs[4]["choices"][0]["finish_reason"] == "length" and
       evs[5]["choices"] == [] and evs[5]["usage"]["completion_tokens"] == 3 and
       evs[6] == "[DONE]",
       "then one delta per token, the finish, the usage chunk, [DONE]", json.dumps(evs))


def check_batch(srv):
    """--max-batch 2: four long requests, two run and two wait."""
    before = srv.metrics().get('vllm:request_success_total{model_name="m1",'
                               'finished_reason="length"}', 0)
    answers = []

    def one():
        answers.append(srv.call("POST", "/v1/completions", {"prompt": "a b", "max_tokens": 20}))

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    seen = wait_until(lambda: (srv.gauge("num_requests_running"),
                               srv.gauge("num_requests_waiting")) == (2, 2))
    ok(seen, "with --max-batch 2, four requests show 2 running and 2 waiting",
       f"{srv.metrics()}")
    for t in threads:
        t.join()
    ok(len(answers) == 4 and all(a[0] == 200 for a in answers), "the four requests succeed",
       f"{[a[0] for a in answers]}")
    m = srv.metrics()
    ok(m['vllm:num_requests_running{model_name="m1"}'] == 0 and
       m['vllm:num_requests_waiting{model_name="m1"}'] == 0,
       "then none runs and none waits", f"{m}")
    after = m['vllm:request_success_total{model_name="m1",finished_reason="length"}']
    ok(after - before == 4, "the success counter grew by four", f"{before} -> {after}")
    ok(m.get('example_http_requests_total{model_name="m1",path="/v1/completions",code="200"}',
             0) >= 8, "the HTTP counter counts answers by path and code", f"{m}")

    c, r = srv.stream("/v1/completions", {"prompt": "gone", "max_tokens": 200})
    next(events(r))
    c.sock.shutdown(socket.SHUT_RDWR)
    c.close()
    freed = wait_until(lambda: srv.gauge("num_requests_running") == 0)
    ok(freed, "a client gone mid-stream frees its slot in the batch", f"{srv.metrics()}")


def check_errors(srv):
    c = srv.conn()
    st1, _, _ = srv.call("GET", "/health", conn=c)
    st2, body, _ = srv.call("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1},
                            conn=c)
    st3, _, _ = srv.call("GET", "/v1/models", conn=c)
    c.close()
    ok((st1, st2, st3) == (200, 200, 200), "three requests share one keep-alive connection",
       f"{st1} {st2} {st3}")
    st, body, _ = srv.call("POST", "/v1/completions", raw=b"{not json")
    ok(st == 400 and body["error"]["type"] == "invalid_request_error" and
       "JSON" in body["error"]["message"], "bad JSON gets 400 in OpenAI's error shape",
       f"{st} {body}")
    for req, param in [({"max_tokens": 2}, "prompt"),
                       ({"prompt": "x", "max_tokens": "2"}, "max_tokens"),
                       ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
                       ({"prompt": "x", "stream": "yes"}, "stream")]:
        st, body, _ = srv.call("POST", "/v1/completions", req)
        ok(st == 400 and body["error"]["param"] == param,
           f"{json.dumps(req)} gets 400 naming '{param}'", f"{st} {body}")
    st, body, _ = srv.call("POST", "/v1/chat/completions", {"messages": []})
    ok(st == 400 and body["error"]["param"] == "messages", "a chat without messages gets 400",
       f"{st} {body}")
    st, body, _ = srv.call("POST", "/v1/completions", raw=b"[1, 2]")
    ok(st == 400, "a body that is not an object gets 400", f"{st} {body}")
    st, body, _ = srv.call("GET", "/nowhere")
    ok(st == 404 and "error" in body, "an unknown route gets 404", f"{st} {body}")


def check_env():
    port = free_port()
    srv = Example(env={"PORT": str(port), "GPUORCH_SERVICE": "svc-a", "MODEL_LOAD_S": "0"})
    ok(srv.port == port, "$PORT is the default port", f"{srv.port} {port}")
    ready = wait_until(lambda: srv.call("GET", "/health")[0] == 200)
    st, body, _ = srv.call("GET", "/v1/models")
    ok(ready and body["data"][0]["id"] == "svc-a",
       "$GPUORCH_SERVICE names the model; $MODEL_LOAD_S=0 is ready at once", f"{body}")
    m = srv.metrics()
    ok('vllm:num_requests_running{model_name="svc-a"}' in m,
       "the gauges carry the model_name label", f"{m}")
    p = subprocess.run([sys.executable, SERVER_PY, "--decode-tps", "0"], capture_output=True,
                       text=True, timeout=DEADLINE_S)
    ok(p.returncode == 2 and "--decode-tps" in p.stderr, "a bad flag exits 2 naming it",
       f"{p.returncode} {p.stderr}")
    p = subprocess.run([sys.executable, SERVER_PY, "--bogus"], capture_output=True, text=True,
                       timeout=DEADLINE_S)
    ok(p.returncode == 2 and "--bogus" in p.stderr, "an unknown flag exits 2 naming it",
       f"{p.returncode} {p.stderr}")


def main():
    srv = Example("--port", "0", "--model", "m1", "--load-s", "3", "--decode-tps", "10",
                  "--max-batch", "2", "--max-tokens", "3")
    check_loading(srv)
    check_completion(srv)
    check_stream(srv)
    check_batch(srv)
    check_errors(srv)
    check_env()


class Children:
    def cleanup(self):
        for p in CHILDREN:
            if p.poll() is None:
                p.kill()
                p.wait()
        diag("servers stopped")


if __name__ == "__main__":
    harness.run(main, Children())
