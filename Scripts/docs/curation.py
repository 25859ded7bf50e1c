#!/usr/bin/env python3
"""DocC curation for the UserSessions module (or, with --module NAME, another module of the package, such as
UserSessionsOpenIDConnect): checks that every public symbol declared in the module is in a topic group, and (with
--draft TYPE…) prints a first draft of a type's curation page to edit by hand.

Reads the symbol graph and the converted archive that Scripts/docs/check.sh produces:
    curation.py SYMBOL_GRAPH_DIR ARCHIVE_DIR                 # check; exit 1 and list what is not curated
    curation.py SYMBOL_GRAPH_DIR ARCHIVE_DIR --draft Credentials UserSessionError/Code
    curation.py SYMBOL_GRAPH_DIR ARCHIVE_DIR --module UserSessionsOpenIDConnect [--draft …]
"""
import glob
import json
import os
import sys
from collections import defaultdict

CONFORMANCE_MEMBERS = {
    "description", "debugDescription", "customMirror", "==(_:_:)", "<(_:_:)", "hash(into:)", "init(from:)",
    "encode(to:)", "init(rawValue:)", "rawValue", "~=(_:_:)",
}


def load(graph_dir, archive_dir, module):
    graph = json.load(open(os.path.join(graph_dir, f"{module}.symbols.json")))
    ours = {}
    for symbol in graph["symbols"]:
        if symbol.get("accessLevel") != "public" or "location" not in symbol:
            continue
        ours[symbol["identifier"]["precise"]] = symbol
    parent = {}
    for relation in graph["relationships"]:
        if relation["kind"] in ("memberOf", "requirementOf", "optionalRequirementOf") and relation["source"] in ours:
            parent.setdefault(relation["source"], relation["target"])
    # Page URLs (with DocC's disambiguation suffixes) by precise identifier, and what the curated groups list.
    url_of = {}
    curated = set()
    generated_titles = defaultdict(list)
    for path in glob.glob(os.path.join(archive_dir, "data", "documentation", "**", "*.json"), recursive=True):
        node = json.load(open(path))
        external = node.get("metadata", {}).get("externalID")
        if external:
            url_of[external] = node["identifier"]["url"]
        for section in node.get("topicSections", []):
            if section.get("generated"):
                generated_titles[node["identifier"]["url"]].append(section.get("title"))
            else:
                curated.update(section.get("identifiers", []))
    return ours, parent, url_of, curated


def link(symbol, url):
    """The symbol's last path component with DocC's disambiguation suffix, if its URL has one."""
    name = symbol["pathComponents"][-1]
    last = url.rsplit("/", 1)[-1]
    suffix = last[len(name):] if last.lower().startswith(name.lower()) else ""
    # DocC lowercases kind suffixes in URLs; hashes are lowercase anyway.
    return name + suffix


def check(ours, parent, url_of, curated):
    missing = []
    for precise, symbol in ours.items():
        url = url_of.get(precise)
        if url is None:
            continue
        if url not in curated:
            missing.append("/".join(symbol["pathComponents"]))
    return sorted(missing)


def draft(type_path, ours, parent, url_of, module):
    by_path = {"/".join(s["pathComponents"]): p for p, s in ours.items()}
    type_id = by_path[type_path.split("-")[0]] if type_path not in by_path else by_path[type_path]
    type_symbol = ours[type_id]
    groups = defaultdict(list)
    for precise, symbol in ours.items():
        if parent.get(precise) != type_id:
            continue
        kind = symbol["kind"]["identifier"]
        name = symbol["pathComponents"][-1]
        if name in CONFORMANCE_MEMBERS:
            group = "Describing and comparing"
        elif kind == "swift.init":
            group = "Creating"
        elif kind == "swift.enum.case":
            group = "Cases"
        elif kind in ("swift.type.property", "swift.type.method"):
            group = "Predefined values"
        elif kind in ("swift.struct", "swift.enum", "swift.class", "swift.protocol"):
            group = "Nested types"
        elif kind in ("swift.property", "swift.subscript"):
            group = "Properties"
        else:
            group = "Methods"
        groups[group].append(link(symbol, url_of.get(precise, "")))
    type_link = "/".join(type_symbol["pathComponents"][:-1] + [link(type_symbol, url_of.get(type_id, ""))])
    lines = [f"# ``{module}/{type_link}``", "", "## Topics"]
    order = ["Creating", "Cases", "Properties", "Methods", "Predefined values", "Nested types",
             "Describing and comparing"]
    for group in order:
        if groups.get(group):
            lines += ["", f"### {group}", ""] + [f"- ``{name}``" for name in sorted(groups[group])]
    return "\n".join(lines) + "\n"


def main():
    graph_dir, archive_dir, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    module = "UserSessions"
    if rest[:1] == ["--module"]:
        module, rest = rest[1], rest[2:]
    ours, parent, url_of, curated = load(graph_dir, archive_dir, module)
    if rest[:1] == ["--draft"]:
        for type_path in rest[1:]:
            print(draft(type_path, ours, parent, url_of, module))
        return
    missing = check(ours, parent, url_of, curated)
    if missing:
        print(f"{len(missing)} public symbols are in no topic group:")
        for path in missing:
            print(f"  {path}")
        sys.exit(1)
    print(f"every one of the {len(ours)} public symbols is in a topic group")


if __name__ == "__main__":
    main()
