"""An install made before the store and the chat became rooms of their own (both were frontend/)
upgrades in place: a database the earlier code migrated and filled is migrated by this code, and
keeps its conversations, messages, shares, documents, the permission staff groups hold and the
content types (the store's app label stayed `frontend`: docs/store.md, "Where the store lives").

The earlier code is the commit before frontend/ went, taken from git. Where git cannot give it (no
repository, a shallow clone), the earlier install is made by this code's migrations, which are the
earlier code's, under the same label: the checks on what this code reads still run.
"""

import json
import os
import subprocess
import sys
import tarfile
from io import BytesIO
from pathlib import Path

from tests.project.test_rooms import ROOT

# The earlier install, migrated and filled with its own code (`manage.py shell`).
FILL = """
from django.core.management import call_command
call_command("migrate", "--no-input", verbosity=0)
from django.contrib.auth.models import Group, Permission, User
from frontend.models import Conversation, ConversationDocument, Message, SharedLink

readers = Group.objects.create(name="readers")
reading = Permission.objects.get(content_type__app_label="frontend", codename="read_all_conversations")
readers.permissions.add(reading)
staff = User.objects.create_user("staff", password="x", is_staff=True)
staff.groups.add(readers)
owner = User.objects.create_user("alice", password="x")
conversation = Conversation.objects.create(owner=owner, title="Kept", system_prompt="Be brief.")
question = Message.objects.create(conversation=conversation, role="user", content="Hello?")
answer = Message.objects.create(
    conversation=conversation, parent=question, role="assistant", content="Hi.", status="complete"
)
conversation.current_leaf = answer
conversation.save()
SharedLink.objects.create(conversation=conversation, token="kept-token", snapshot={"title": "Kept"})
ConversationDocument.objects.create(conversation=conversation, name="a.txt", text="Text.", tokens=2)
"""

# This code's migrate on it, and what this code reads of it then, through its own modules.
READ = """
from django.core.management import call_command
call_command("migrate", "--no-input", verbosity=0)
import json
from django.contrib.auth.models import User
from django.contrib.contenttypes.models import ContentType
from django.db.migrations.executor import MigrationExecutor
from django.db import connection
from conversations import selectors
from conversations.models import Conversation, Message

conversation = Conversation.objects.get(title="Kept")
staff, owner = User.objects.get(username="staff"), User.objects.get(username="alice")
executor = MigrationExecutor(connection)
print(json.dumps({
    "messages": [m.content for m in selectors.conversation_path(conversation)],
    "shares": list(conversation.shared_links.values_list("token", flat=True)),
    "documents": list(conversation.documents.values_list("name", flat=True)),
    "staff_reads_all": selectors.may_read_all(staff),
    "owner_reads_all": selectors.may_read_all(owner),
    "listed_for_staff": [c.title for c in selectors.conversation_list(user=staff, all_users=True)],
    "content_types": sorted(ContentType.objects.filter(app_label="frontend").values_list("model", flat=True)),
    "content_type_of_conversation": ContentType.objects.get_for_model(Conversation).app_label,
    "tables": [Conversation._meta.db_table, Message._meta.db_table],
    "unapplied": [m.name for m, _ in executor.migration_plan(executor.loader.graph.leaf_nodes())],
}))
"""


def _earlier_code(into: Path) -> Path | None:
    """The tree of the last commit that had frontend/models.py, unpacked under `into`; None without git."""
    try:
        removed = subprocess.run(
            ["git", "rev-list", "-1", "HEAD", "--", "frontend/models.py"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not removed:
            return None
        archive = subprocess.run(
            ["git", "archive", f"{removed}^"], cwd=ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into if (into / "frontend" / "models.py").is_file() else None


def _manage(code: Path, database: Path, data: Path, *arguments: str) -> str:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DATABASE_", "DJANGO_", "PYTEST_"))
    }
    env.update(
        DATABASE_URL=f"sqlite:///{database}",
        DATA_DIR=str(data),
        DEBUG="true",
        DJANGO_SETTINGS_MODULE="chatsite.settings",
    )
    command = [sys.executable, "manage.py", *arguments]
    done = subprocess.run(command, cwd=code, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_an_install_made_before_the_split_keeps_its_store_when_it_migrates(tmp_path):
    database, data = tmp_path / "store.sqlite3", tmp_path / "data"
    data.mkdir()
    earlier = _earlier_code(tmp_path / "earlier")
    fill = FILL
    if earlier is None:  # the earlier schema from the migrations, which kept their label
        earlier, fill = ROOT, FILL.replace("from frontend.models", "from conversations.models")
    _manage(earlier, database, data, "shell", "-c", fill)  # migrated and filled by the earlier code
    read = json.loads(_manage(ROOT, database, data, "shell", "-c", READ).strip().splitlines()[-1])

    assert read == {
        "messages": ["Hello?", "Hi."],
        "shares": ["kept-token"],
        "documents": ["a.txt"],
        "staff_reads_all": True,
        "owner_reads_all": False,
        "listed_for_staff": ["Kept"],
        "content_types": [
            "conversation",
            "conversationdocument",
            "message",
            "sharedlink",
            "storedcompletion",
        ],
        "content_type_of_conversation": "frontend",
        "tables": ["frontend_conversation", "frontend_message"],
        "unapplied": [],
    }
