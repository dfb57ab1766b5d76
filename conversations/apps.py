from django.apps import AppConfig


class ConversationsConfig(AppConfig):
    """The conversation store. Its label stays "frontend", the name of the package that held it
    before the chat and the store became rooms of their own: the label names its tables
    (frontend_conversation, ...), its migrations' rows, its content types and its permission
    (frontend.read_all_conversations, which staff groups hold), so an install keeps all of them
    as they are when it upgrades (docs/store.md, "Where the store lives")."""

    name = "conversations"
    label = "frontend"  # frontend: the store's label, kept from before the rename (see above)
    verbose_name = "Conversations"
