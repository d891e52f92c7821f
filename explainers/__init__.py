"""Graph explainers for splitting invalid fusion groups (docs/design.md, "GNN pipeline").

The GIN validity classifier, GNNExplainer / PGExplainer (PyG) and RG-Explainer behind one
interface (:mod:`explainers.base`), their training and shipped weights. Importing this
package is cheap: it only registers the builtin explainers, and with them the ``gnne``,
``pg`` and ``rg`` splitters; torch loads when one is used.
"""

from explainers.registry import EXPLAINERS, ExplainerKind, register_explainer

register_explainer("gnne", "explainers.kinds:GNNE", help="GNNExplainer")
register_explainer("pg", "explainers.kinds:PG", help="PGExplainer")
register_explainer("rg", "explainers.kinds:RG", help="RG-Explainer")

__all__ = ["EXPLAINERS", "ExplainerKind", "register_explainer"]
