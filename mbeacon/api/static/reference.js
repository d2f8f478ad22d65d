// Swagger UI over this beacon's OpenAPI document. No validator badge (it would call a third-party
// service) and no persisted authorization: a key typed into "Authorize" lives in this page's memory.
(function () {
  "use strict";
  var root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.spec,
    dom_id: "#swagger-ui",
    deepLinking: true,
    validatorUrl: null,
    persistAuthorization: false,
    displayRequestDuration: true,
    presets: [SwaggerUIBundle.presets.apis],
    layout: "BaseLayout"
  });
})();
