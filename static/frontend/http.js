// JSON requests to the chat's own endpoints, with the session's CSRF token.

// The session's CSRF token, for requests that change something.
export function csrfToken() {
  const match = /(?:^|;\s*)csrftoken=([^;]+)/.exec(document.cookie);
  return match ? decodeURIComponent(match[1]) : "";
}

// Resolves to the parsed body; rejects with an Error whose message is the server's detail.
async function request(method, url, body) {
  const response = await fetch(url, {
    method,
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = new Error((data.error && data.error.detail) || "Request failed (" + response.status + ")");
    error.code = data.error && data.error.code;
    throw error;
  }
  return data;
}

export const post = (url, body) => request("POST", url, body || {});
export const get = (url) => request("GET", url);
