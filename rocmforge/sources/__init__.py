"""Sources: identities of git, path and archive sources, extra inputs, patches,
build requirements, and which source caches an entry used."""
