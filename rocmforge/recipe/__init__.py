"""Recipes: the frozen model, the TOML loader and the lints that run before anything is fetched."""
