"""An answer's life, whichever surface asked for it and whichever process runs it: started by one
web process, kept alive by its heartbeat, continued by another when that process dies or drains,
followed by any.

- `run`: the life itself (`AnswerRun`): admitted, requested, streamed within its time limits, ended,
  counted and stored; each surface gives it a sink (the chat's in chat.generation, the API's in
  openai_api.serving).
- `admission`: the limits on answers at once and messages a minute, counted in Redis.
- `deadlines`: its time limits (first token, between tokens, whole answer).
- `watcher`: what runs beside it: its heartbeat, its admission lease, its ear for stops.
- `outcomes`: how its end is told (`Outcome`); `status`: the status it is stored with; `metrics`: its metrics.
- `ownership`: who owns an answer now (a fencing token in Redis), the registry of running answers
  and their heartbeats, and the writes that only the owner may make.
- `takeover`: the scan every web process makes for answers whose owner stopped beating, and the
  claim that gives one of them, exactly one, the answer to continue.
- `drain`: what a web process does on SIGTERM: no new work, its answers finished or handed over;
  `process`: this process's own state (the answers it runs, whether it drains), which every module reads.

docs/resilience.md tells the whole story.
"""
