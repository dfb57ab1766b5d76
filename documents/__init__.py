"""Reading documents without trusting them: the text of a txt, md, html or pdf file, extracted in
a bounded child process (`documents.child`) that the caller awaits (`documents.reader`)."""

# The format each file suffix is read as (documents.child's --format).
FORMATS = {".txt": "text", ".md": "text", ".markdown": "text", ".html": "html", ".htm": "html", ".pdf": "pdf"}
