// {{name}}: a sandfleet sizing policy. Warms one sandbox per task of each
// image, at most maxWarmpoolSize, all images in one window (none with the
// "none" strategy).

export const sizing = {
  plan(tasks, limits) {
    if (limits.maxConcurrent === 0) {
      throw { kind: "invalid-input", message: "max-concurrent must be at least 1" };
    }
    const counts = [...tasks];
    const replicas = counts.map((count) =>
      limits.strategy === "none" ? 0 : Math.min(count, limits.maxWarmpoolSize),
    );
    const images = [...counts.keys()].filter((image) => counts[image] > 0);
    return {
      replicas,
      windows: images.length > 0 ? [{ images }] : [],
      peakWarm: replicas.reduce((sum, count) => sum + count, 0),
    };
  },
};
