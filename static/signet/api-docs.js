// Swagger UI over our schema, from drf-spectacular-sidecar's files (no CDN).
window.addEventListener("load", function () {
  "use strict";
  var node = document.getElementById("swagger-ui");
  if (!node || !window.SwaggerUIBundle) return;
  window.SwaggerUIBundle({
    url: node.getAttribute("data-schema-url"),
    dom_id: "#swagger-ui",
    deepLinking: true,
    persistAuthorization: false,
  });
});
