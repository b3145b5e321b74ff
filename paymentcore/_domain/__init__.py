"""The domain: records, money, the catalogue, policy and transitions, signing, errors.

It imports nothing else of the package (checked by import-linter, see pyproject.toml)."""
