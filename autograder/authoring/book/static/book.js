/* The book's scripts beside the PyData theme's.

   Display equations fit the text column: MathJax 3 cannot break a formula's line, so one wider than the
   column is set smaller, down to SMALLEST of its size; one still too wide then scrolls, with the scroll
   bar book.css keeps visible. Done once MathJax has typeset the page, and again when the window's width
   changes or a folded block (a hint, an answer) opens. */
(() => {
  const SMALLEST = 0.8;

  const fitEquations = () => {
    for (const math of document.querySelectorAll('mjx-container[display="true"] > mjx-math')) {
      math.style.fontSize = "";
      const box = math.parentElement;
      const over = box.scrollWidth / box.clientWidth;
      if (over > 1) math.style.fontSize = `${Math.floor(Math.max(SMALLEST, 1 / over) * 1000) / 10}%`;
    }
  };

  window.addEventListener("load", () => {
    const typeset = window.MathJax?.startup?.promise;  // pages without formulas load no MathJax
    if (!typeset) return;
    typeset.then(() => {
      fitEquations();
      document.addEventListener("toggle", fitEquations, true);  // (toggle events do not bubble)
      let width = window.innerWidth;
      window.addEventListener("resize", () => {
        if (window.innerWidth !== width) {
          width = window.innerWidth;
          fitEquations();
        }
      });
    });
  });
})();
