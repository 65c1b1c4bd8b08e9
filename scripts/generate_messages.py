"""Regenerate broker/protocol/messages.py from the API registry (run from the repository root:
``.venv/bin/python scripts/generate_messages.py``, then ``ruff format`` the file)."""

from pathlib import Path

from broker.protocol import registry

TARGET = Path("broker/protocol/messages.py")
src = TARGET.read_text()
head = src[: src.index("    from kio.schema")]
if "import interbroker" not in head:
    head = head.rstrip("\n") + "\n    from broker.protocol import interbroker\n"
imports = []
aliases = []
for key, (name, lo, hi) in sorted(registry.SUPPORTED_APIS.items()):
    for kind in ("request", "response"):
        members = []
        for v in range(lo, hi + 1):
            cls = (
                registry.request_class(key, v)
                if kind == "request"
                else registry.response_class(key, v)
            )
            mod = cls.__module__
            if mod.startswith("kio.schema."):
                pkg = ".".join(mod.split(".")[:3])
                api = mod.split(".")[2]
                ver = mod.split(".")[3]
                modalias = f"{api}_{ver}"
                line = f"    from {pkg} import {ver} as {modalias}"
                if line not in imports:
                    imports.append(line)
                members.append(f"{modalias}.{cls.__name__}")
            else:
                members.append(f"interbroker.{cls.__name__}")
        aliases.append((f"{name}{kind.capitalize()}", members))
out = [head.rstrip("\n"), *imports, ""]
for alias, members in aliases:
    uniq = list(dict.fromkeys(members))
    out.append(f"    {alias}: TypeAlias = " + " | ".join(uniq))
TARGET.write_text("\n".join(out) + "\n")
