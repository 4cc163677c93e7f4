"""Draw the backward graph autograd recorded for a tensor, for teaching."""

from __future__ import annotations

import torch


def draw_graph(tensor: torch.Tensor, names: dict | None = None, ax=None, title: str | None = None):
    """Plot the nodes reachable from ``tensor.grad_fn``: the graph ``backward()`` will walk.

    Each box is a backward node (``type(node).__name__``); arrows point the way gradients flow,
    from the output down to ``AccumulateGrad`` boxes, which write into the leaves' ``.grad``.
    ``names`` maps labels to leaf tensors (``{"x": x}``) so those boxes say whose ``.grad`` it is.
    Returns the matplotlib ``Axes``.
    """
    leaf_names = {id(t): label for label, t in (names or {}).items()}
    import matplotlib.pyplot as plt

    if tensor.grad_fn is None:
        raise ValueError("this tensor has no grad_fn: autograd recorded nothing for it")
    depth: dict = {tensor.grad_fn: 0}
    edges = []
    frontier = [tensor.grad_fn]
    while frontier:  # breadth first, so each node sits one row below the node that reaches it first
        node = frontier.pop(0)
        for child, _ in node.next_functions:
            if child is None:
                continue
            edges.append((node, child))
            if child not in depth:
                depth[child] = depth[node] + 1
                frontier.append(child)
    rows: dict[int, list] = {}
    for node, d in depth.items():
        rows.setdefault(d, []).append(node)
    position = {n: (i - (len(row) - 1) / 2, -d) for d, row in rows.items() for i, n in enumerate(row)}

    if ax is None:
        width = max(len(row) for row in rows.values())
        _, ax = plt.subplots(figsize=(max(4, 2.6 * width), 1.2 * len(rows) + 0.6))
    for parent, child in edges:
        ax.annotate("", xy=position[child], xytext=position[parent],
                    arrowprops=dict(arrowstyle="->", color="gray", shrinkA=14, shrinkB=14))
    for node, (x, y) in position.items():
        label = type(node).__name__
        if hasattr(node, "variable"):
            leaf = leaf_names.get(id(node.variable), f"leaf {list(node.variable.shape)}")
            label += f"\n(into {leaf}.grad)"
        color = "#d9ead3" if hasattr(node, "variable") else "#cfe2f3"
        ax.text(x, y, label, ha="center", va="center", fontsize=9,
                bbox=dict(boxstyle="round,pad=0.4", facecolor=color, edgecolor="gray"))
    xs = [p[0] for p in position.values()]
    ax.set_xlim(min(xs) - 1, max(xs) + 1)
    ax.set_ylim(-len(rows) + 0.5, 0.5)
    ax.axis("off")
    ax.set_title(title or "backward graph: gradients flow from the top down")
    return ax
