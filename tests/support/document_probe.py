"""A stand-in for documents.child that misbehaves on purpose, under the real child's limits
(documents.child.apply_limits): stdin says what to do."""

import json
import os
import resource
import sys

from documents.child import apply_limits

apply_limits(sys.argv[1:])
order = sys.stdin.read()
if order == "describe":
    limits = {
        "cpu": resource.getrlimit(resource.RLIMIT_CPU)[0],
        "memory": resource.getrlimit(resource.RLIMIT_AS)[0],
    }
    print(json.dumps({"environment": dict(os.environ), "limits": limits}))
elif order == "spin":
    while True:
        pass
elif order == "flood":
    while True:
        sys.stdout.write("x" * 65536)
