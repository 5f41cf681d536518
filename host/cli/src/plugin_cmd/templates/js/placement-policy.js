// {{name}}: a sandfleet placement policy. Picks the healthy cluster with
// the most free slots (every cluster counts when none is healthy); the
// lowest index wins a tie.

export const placement = {
  place(demand, clusters) {
    const all = [...clusters.freeSlots.keys()];
    const unhealthy = new Set(clusters.unhealthy);
    const healthy = all.filter((i) => !unhealthy.has(i));
    const candidates = healthy.length > 0 ? healthy : all;
    if (candidates.length === 0) {
      throw { kind: "invalid-input", message: "no clusters to place on" };
    }
    // Only a strictly larger count replaces the best so far, so the lowest
    // index wins a tie.
    return candidates.reduce((best, i) =>
      clusters.freeSlots[i] > clusters.freeSlots[best] ? i : best,
    );
  },
};
