"""Hostile YAML the tests feed to every parser: refused before it can expand."""


def alias_bomb(levels: int = 9, width: int = 9, flow: bool = False) -> str:
    """A 'billion laughs' document (or one flow list): each anchor holds `width` aliases of the one before."""
    names = [chr(ord("a") + i) for i in range(levels)]
    items = [f"&{names[0]} [{','.join(['x'] * width)}]"]
    items += [f"&{n} [{','.join(['*' + p] * width)}]" for p, n in zip(names, names[1:])]
    if flow:
        return "[" + ", ".join(items) + "]"
    return "".join(f"{n}: {item}\n" for n, item in zip(names, items))
