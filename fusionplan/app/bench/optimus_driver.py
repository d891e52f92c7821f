"""The oracle's driver: runs *inside Optimus's own interpreter* (Python 3.6+, its numpy and
scipy) with an Optimus checkout on ``sys.path``, never inside fusionplan.

``fusionplan bench optimus`` (``optimus_oracle.py``) starts it as a subprocess, writes a JSON
request on its stdin and reads one JSON answer from its stdout. It calls Optimus's modules as
Optimus's own ``fusion/tools/optimal_schedule_search.py`` does (arch ``3_level_mem_<B>KB.json``,
dataflow ``dataflow_Ow_Cout.json``, batch 1) and adds nothing to their arithmetic:

* ``optimum``: Optimus's search (its ``hafs`` dynamic programme over its fusion groups). With
  ``objective: "energy"`` it is Optimus run unmodified; with ``"dram"`` each group's cost is
  the DRAM traffic Optimus reports for it (below) instead of its energy estimate. Each group
  of the optimum comes with its reported DRAM and energy (``price``) and the cost the search
  summed for it (``group_objective``).
* ``price``: each given group priced as Optimus's ``res_parse`` reports it: the schedule its
  ``_find_schedule`` picks, mapped by ``mapping`` and counted by ``CostModel.get_cost``: the
  DRAM elements and the energy in pJ (``energy``; ``energy_split``: register files, global
  buffer, DRAM, array network, MACs), and ``energy_cost``, the estimate ``_find_schedule``
  returns, which is what the search adds up; plus whether that schedule's tiles, rounded up
  as Optimus rounds them, overflow its own buffer.

Kept to the syntax of Python 3.6 (Optimus's documented interpreter): no annotations that run.
"""

import importlib
import json
import math
import sys
import time

NET_MODULES = {
    "optimus_resnet18": "resnet18",
    "optimus_resnet50": "resnet50",
    "optimus_vgg16": "vggnet",
    "optimus_squeezenet": "squeezenet",
    "optimus_mobilenet": "mobilenet",
}
DATAFLOW = "fusion/dataflow/dataflow_Ow_Cout.json"


def _optimus(module):
    """One of Optimus's modules, from the checkout ``main`` put on ``sys.path``."""
    return importlib.import_module(module)


class Oracle:
    """One network at one buffer size, loaded as Optimus's search tool loads it."""

    def __init__(self, root, net, buffer_kb):
        fusion = _optimus("fusion.scheduling")
        arch = f"{root}/fusion/arch/3_level_mem_{buffer_kb}KB.json"
        arch_info, dataflow_info = fusion.extract_info(arch, f"{root}/{DATAFLOW}")
        self.resource = fusion.Resource.arch(arch_info)
        self.lower = fusion.LoopLowerBound.dataflow(dataflow_info)
        fusion.batch_size.init(1)
        self.network = _optimus("fusion.nn_models").import_network(NET_MODULES[net])
        self.cost_model = fusion.CostModel(self.network, self.resource)
        self.generator = fusion.ScheduleGenerator(
            self.network, self.resource, self.cost_model, self.lower
        )
        self._dram = {}

    def layers(self):
        return list(self.network)

    def price(self, group, tiles=True):
        """Optimus's reported DRAM elements of ``group`` (a list of its layer names), its
        [ifmap, ofmap, filter] split, and (``tiles``) the tile facts behind them."""
        rank = {name: i for i, name in enumerate(self.network)}
        group = sorted(group, key=rank.__getitem__)  # one price per set: in network order
        key = tuple(group)
        answer = self._dram.get(key)
        if answer is None:
            answer = self._dram[key] = self._price(group)
        if tiles and answer["priced"] and len(group) > 1 and "tiles" not in answer:
            answer.update(self._tiles(group))
        return answer

    def _price(self, group):
        sched = self.generator._find_schedule(group)
        cost, blocks, orders, vertices, filter_fit = sched
        if cost == float("inf"):
            answer = {"priced": False, "reason": "Optimus finds no schedule for it"}
        else:
            _, points = self.generator.mapping(vertices, blocks, orders)
            access, levels, noc, macs, energy = self.cost_model.get_cost(
                points, vertices, filter_fit
            )
            split = [int(x) for x in access[2]]
            answer = {
                "priced": True,
                "dram": math.ceil(sum(split)),
                "split": split,
                "filter_fit": bool(filter_fit),
                "order": list(vertices),
                "energy_cost": float(cost),
                "energy": float(energy),
                "energy_split": [float(sum(level)) for level in levels] + [float(noc), float(macs)],
            }
        return answer

    def _tiles(self, group):
        """The fused schedule's tiles after Optimus's rounding (rows per tile and channels per
        op), and the buffer they need by its own constraint (``InterLayerReuse.con``), in
        elements."""
        interlayer = _optimus("fusion.scheduling.interlayer")
        solved = []
        solver = interlayer.minimize

        def recording(*args, **kwargs):
            result = solver(*args, **kwargs)
            solved.append(result)
            return result

        interlayer.minimize = recording
        try:
            ilr = interlayer.InterLayerReuse(self.network, group, self.resource, self.lower)
            ilr.sched(0)
        finally:
            interlayer.minimize = solver
        s = self.resource.buffer(1).capacity
        facts = {
            "tile_rows": {},
            "tile_channels": {},
            "tiles": int(ilr.tile_num),
            "footprint": float(ilr.min_feature_footprint),
            "row_step": float(ilr.add_one_line_footprint),
            "sliced": [n for n, f in zip(ilr.dag_vertex_list, ilr.is_full_buffer) if not f],  # noqa: B905
            "capacity": s,
            "solver": None,
        }
        for name, block in zip(ilr.dag_vertex_list, ilr.loop_block):  # noqa: B905 (Python 3.6)
            if block is not None:
                facts["tile_rows"][name] = block[4]
                facts["tile_channels"][name] = [block[2], block[5]]
        need = None
        if solved and solved[0].success:
            x = [float(v) for v in solved[0].x]
            rounded = [math.ceil(v) for v in x]
            facts["solver"] = {"x": x, "rounded": rounded}
            h_m = min([self.network.input_layer().hofm] + [self.network[n].hofm for n in ilr.lasts])
            constraints = ilr.con((1, h_m, ilr.idx_dict))
            need = s - constraints[-1]["fun"](rounded)
            if ilr.sfil_fit:
                need += ilr.fused_weight_size
        facts["buffer_need"] = need
        facts["overflow"] = need is not None and need > s
        return facts

    def optimum(self, objective):
        """Optimus's optimal partition: its groups, their reported DRAM and energy (pJ), and
        the cost its search summed for each (its energy estimate, or the DRAM)."""
        generator = self.generator
        if objective == "dram":
            generator = _DramGenerator(self)
        start = time.perf_counter()
        schedule, _ = generator.schedule_search()
        seconds = time.perf_counter() - start
        groups = [list(section[0]) for section in schedule]
        priced = [self.price(g, tiles=False) for g in groups]
        return {
            "groups": groups,
            "group_dram": [p["dram"] for p in priced],
            "dram": sum(p["dram"] for p in priced),
            "group_energy": [p["energy"] for p in priced],
            "energy": sum(p["energy"] for p in priced),
            "group_objective": [float(section[3]) for section in schedule],
            "seconds": seconds,
        }


class _DramGenerator:
    """Optimus's search with each group costed by the DRAM traffic Optimus reports for it."""

    def __init__(self, oracle):
        base = oracle.generator
        ScheduleGenerator = _optimus("fusion.scheduling").ScheduleGenerator

        class Generator(ScheduleGenerator):
            def _find_schedule(self, g, mode=0):
                found = ScheduleGenerator._find_schedule(self, g, mode)
                if found[0] == float("inf"):
                    return found
                return (oracle.price(list(g), tiles=False)["dram"], *found[1:])

        self._inner = Generator(base.network, base.resource, base.cost_model, base.loop_lower_bound)

    def schedule_search(self):
        return self._inner.schedule_search()


def run(request):
    """Answer every task of ``request`` (see the module docstring)."""
    root = request["optimus_dir"]
    answers = []
    oracles = {}
    for task in request["tasks"]:
        key = (task["net"], task["buffer_kb"])
        if key not in oracles:
            oracles[key] = Oracle(root, task["net"], task["buffer_kb"])
        oracle = oracles[key]
        if task["kind"] == "layers":
            answers.append({"layers": oracle.layers()})
        elif task["kind"] == "optimum":
            answers.append(oracle.optimum(task["objective"]))
        elif task["kind"] == "price":
            answers.append({"groups": [oracle.price(g) for g in task["groups"]]})
        else:
            raise ValueError("unknown task kind {!r}".format(task["kind"]))
    return {"answers": answers}


def main():
    request = json.load(sys.stdin)
    sys.path.insert(0, request["optimus_dir"])
    out, sys.stdout = sys.stdout, sys.stderr  # whatever Optimus prints stays off the answer
    try:
        answer = run(request)
    finally:
        sys.stdout = out
    out.write(json.dumps(answer, sort_keys=True))


if __name__ == "__main__":
    main()
