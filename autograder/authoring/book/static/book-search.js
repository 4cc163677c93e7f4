/* Search excerpts for a book opened from disk (the search page only).

   Sphinx's search fetches each result's page to show an excerpt of it; browsers refuse such requests from
   a file:// page, so the results would show titles only. A page may still load scripts beside it: the
   book writes each page's body as _page_texts/<page>.js (conf.py), and this script loads the one of each
   result and gives it to Sphinx's own excerpt maker. Served over HTTP, Sphinx fetches as usual. */
(() => {
  if (window.location.protocol !== "file:") return;
  DOCUMENTATION_OPTIONS.SHOW_SEARCH_SUMMARY = false;  // Sphinx's requests would fail: make none

  const texts = new Map();  // page -> its body, once its script has run
  const waiting = new Map();  // page -> results (li elements) waiting for its script
  const words = () => (new URLSearchParams(window.location.search).get("q") || "").split(/\s+/).filter(Boolean);

  const addExcerpt = (result, body) => {
    const anchor = result.querySelector("a").hash;
    const excerpt = Search.makeSearchSummary(`<div role="main">${body}</div>`, words(), anchor);
    if (excerpt) result.appendChild(excerpt);
  };

  window.bookPageText = (page, body) => {  // what each _page_texts/<page>.js calls
    texts.set(page, body);
    for (const result of waiting.get(page) || []) addExcerpt(result, body);
    waiting.delete(page);
  };

  const excerptFor = (result) => {
    const link = result.querySelector("a");
    if (!link) return;
    const page = link.getAttribute("href").replace(/\.html(#.*)?$/, "");
    if (texts.has(page)) return addExcerpt(result, texts.get(page));
    if (!waiting.has(page)) {
      waiting.set(page, []);
      const script = document.createElement("script");
      script.src = `${document.documentElement.dataset.content_root || ""}_page_texts/${page}.js`;
      document.head.appendChild(script);
    }
    waiting.get(page).push(result);
  };

  document.addEventListener("DOMContentLoaded", () => {
    new MutationObserver((changes) => {
      for (const change of changes)
        for (const node of change.addedNodes)
          if (node.nodeName === "LI") excerptFor(node);
    }).observe(document.getElementById("search-results"), {childList: true, subtree: true});
  });
})();
