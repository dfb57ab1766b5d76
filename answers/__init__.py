"""An answer's life, whichever process runs it: started by one web process, kept alive by its
heartbeat, continued by another when that process dies or drains, followed by any.

- `ownership`: who owns an answer now (a fencing token in Redis), the registry of running answers
  and their heartbeats, and the writes that only the owner may make.
- `takeover`: the scan every web process makes for answers whose owner stopped beating, and the
  claim that gives one of them, exactly one, the answer to continue.
- `drain`: what a web process does on SIGTERM: no new work, its answers finished or handed over.

The answer itself runs in frontend.generation; docs/resilience.md tells the whole story.
"""
