/** A line plot on a canvas: a rolling window of samples, one line per series, no library. */
/** Draw `series` (equal lengths, oldest first) in `canvas`, scaled to their maximum (at
 * least `floor`, so an idle gateway draws a flat line at the bottom, not noise), the newest
 * sample at the right edge of a window of `capacity` samples. */
export function drawPlot(canvas, series, unit, floor = 1, capacity = 120) {
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth;
    const height = canvas.clientHeight;
    if (canvas.width !== width * ratio || canvas.height !== height * ratio) {
        canvas.width = width * ratio;
        canvas.height = height * ratio;
    }
    const context = canvas.getContext("2d");
    if (context === null)
        return;
    const style = getComputedStyle(canvas);
    context.setTransform(ratio, 0, 0, ratio, 0, 0);
    context.clearRect(0, 0, width, height);
    const values = series.flatMap((s) => s.values.filter((v) => v !== null));
    const top = niceMax(Math.max(floor, ...values));
    const left = 48;
    const bottom = height - 18;
    context.font = "11px system-ui, sans-serif";
    context.fillStyle = style.getPropertyValue("--muted");
    context.strokeStyle = style.getPropertyValue("--grid");
    context.lineWidth = 1;
    for (let i = 0; i <= 4; i++) {
        const y = 8 + ((bottom - 8) * i) / 4;
        context.beginPath();
        context.moveTo(left, y);
        context.lineTo(width - 4, y);
        context.stroke();
        context.fillText(label(top * (1 - i / 4)), 2, y + 4);
    }
    context.fillText(unit, left, height - 4);
    for (const s of series) {
        const n = s.values.length;
        if (n < 2)
            continue;
        context.strokeStyle = style.getPropertyValue(s.colour);
        context.lineWidth = 2;
        context.beginPath();
        let drawing = false;
        s.values.forEach((v, i) => {
            if (v === null) {
                drawing = false;
                return;
            }
            const x = left + ((width - 4 - left) * (Math.max(capacity, n) - n + i)) / (Math.max(capacity, n) - 1);
            const y = bottom - ((bottom - 8) * v) / top;
            if (drawing)
                context.lineTo(x, y);
            else
                context.moveTo(x, y);
            drawing = true;
        });
        context.stroke();
    }
}
function niceMax(value) {
    const power = 10 ** Math.floor(Math.log10(value));
    for (const step of [1, 2, 5, 10])
        if (value <= step * power)
            return step * power;
    return 10 * power;
}
function label(value) {
    if (value >= 1e6)
        return `${(value / 1e6).toFixed(1)}M`;
    if (value >= 1e3)
        return `${(value / 1e3).toFixed(1)}k`;
    return value < 10 ? value.toFixed(1) : value.toFixed(0);
}
