"""Placeholder; replaced below."""
def render(doc, docs_dir):
  return docs_dir
