"""API keys as a client sends them."""

from apitokens.services import token_issue


def bearer(user, *scopes: str) -> dict[str, str]:
    """The Authorization header of a new API key of `user` with `scopes`, for Django's test client
    (`headers=`) and httpx alike."""
    _, plain = token_issue(user=user, scopes=scopes)
    return {"Authorization": f"Bearer {plain}"}
