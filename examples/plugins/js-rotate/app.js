// rotate: a sandfleet placement policy in JavaScript.
//
// Rotates through the healthy clusters that can take the demand, each
// taking `weight` turns per cycle (a cluster of weight 0 takes none). A pool
// needs a free slot; a claim needs a free slot or a warm sandbox of its
// image ready to be claimed (a full cluster may still hold warm ones).
//
// A plugin keeps no state between calls, so the position in the rotation
// comes from the decision's sequence number, a u64 — which JavaScript
// receives as a BigInt: `demand.sequence % n` with a Number `n` throws a
// TypeError, and `Number(demand.sequence)` loses precision past 2^53, so the
// arithmetic stays in BigInt.
//
// Build (see README.md): npm install && npm run build

export const placement = {
  place(demand, clusters) {
    const count = clusters.freeSlots.length;
    if (count === 0) {
      throw { kind: "invalid-input", message: "no clusters to place on" };
    }
    const unhealthy = new Set(clusters.unhealthy);
    const claim = demand.kind === "claim";
    const takes = (i) =>
      clusters.freeSlots[i] > 0 || (claim && clusters.warmReady[i] > 0);
    // One entry per turn: cluster i appears weight[i] times.
    const turns = [];
    for (let i = 0; i < count; i++) {
      if (!unhealthy.has(i) && takes(i)) {
        for (let w = 0; w < clusters.weight[i]; w++) turns.push(i);
      }
    }
    if (turns.length === 0) {
      throw {
        kind: "unsatisfiable",
        message: "no healthy cluster of non-zero weight can take it",
      };
    }
    return turns[Number(demand.sequence % BigInt(turns.length))];
  },
};
